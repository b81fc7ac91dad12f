// The one writer of what a metered URL, a pass purchase and a WebSocket upgrade answer: every answer carries
// the request id and CORS (a browser agent reads the 402 and the receipt; cors.ts), written here once, for
// tollgate's own answers (a 402, a refusal, an error, a scheme's own answer, a kept answer replayed) and as the
// extra headers of an upstream's relayed one.
// Corked (an answer after an await must be) through module-level slots, not a closure per answer: uWS runs the
// cork's callback synchronously, so one answer is in the slots at a time.
import {
  type ErrorCode,
  type ErrorDetails,
  errorBody,
  errorStatusLine,
  JSON_CONTENT_TYPE,
} from '../errors.ts'
import { CORS_PAIRS } from './cors.ts'
import type { HttpResponse } from './uws.ts'

/** Flat [name, value, …]: constants pass without allocating. */
export type FlatHeaders = readonly string[]

const NONE: FlatHeaders = []
export const RETRY_AFTER_1: FlatHeaders = ['retry-after', '1']
export const RETRY_AFTER_2: FlatHeaders = ['retry-after', '2']
export const RETRY_AFTER_30: FlatHeaders = ['retry-after', '30']
const ACAO = CORS_PAIRS[0]!
const EXPOSE = CORS_PAIRS[1]!

/** Retry-After for an answer that says when to try again (a scheme's verdict carries the seconds). */
export function retryAfter(seconds: number | undefined): FlatHeaders {
  return seconds === undefined ? NONE : ['retry-after', String(seconds)]
}

// The answer being written, between writeAnswer and its cork's callback.
let res: HttpResponse
let status = ''
let requestId = ''
let contentType: string | null = null
let headers: FlatHeaders = NONE
let pairs: ReadonlyArray<readonly [string, string]> = []
let body: string | Buffer = ''

function writeCorked(): void {
  res.writeStatus(status)
  if (contentType !== null) res.writeHeader('content-type', contentType)
  res.writeHeader('x-request-id', requestId)
  res.writeHeader(ACAO[0], ACAO[1])
  res.writeHeader(EXPOSE[0], EXPOSE[1])
  for (let i = 0; i < headers.length; i += 2) res.writeHeader(headers[i]!, headers[i + 1]!)
  for (const [name, value] of pairs) res.writeHeader(name, value)
  res.end(body)
}

/**
 * Writes a whole answer of tollgate's own: `statusLine` ('402 Payment Required'), its content type (null: the
 * answer's headers name it), its headers (flat, then as pairs: a scheme's or a kept answer's own) and body.
 */
export function writeAnswer(
  to: HttpResponse,
  statusLine: string,
  id: string,
  type: string | null,
  flat: FlatHeaders,
  content: string | Buffer,
  ownPairs: ReadonlyArray<readonly [string, string]> = [],
): void {
  res = to
  status = statusLine
  requestId = id
  contentType = type
  headers = flat
  pairs = ownPairs
  body = content
  to.cork(writeCorked)
  headers = NONE
  pairs = []
  body = ''
}

/** An error answer from the registry (src/errors.ts), with its extra headers (a Retry-After). */
export function writeErrorAnswer(
  to: HttpResponse,
  code: ErrorCode,
  id: string,
  details?: ErrorDetails,
  flat: FlatHeaders = NONE,
): void {
  writeAnswer(to, errorStatusLine(code), id, JSON_CONTENT_TYPE, flat, errorBody(code, id, details))
}

/** The headers tollgate adds to a relayed answer that has no receipt (a free call, a 5xx). */
export function relayedHeaders(id: string): Array<[string, string]> {
  return [['x-request-id', id], ACAO, EXPOSE]
}

/** The headers tollgate adds to a paid answer: the receipt id too (its receipt is read at /receipts/<id>). */
export function paidHeaders(id: string, receiptId: string): Array<[string, string]> {
  return [['x-request-id', id], ['x-receipt-id', receiptId], ACAO, EXPOSE]
}
