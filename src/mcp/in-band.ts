// The x402 MCP transport (coinbase/x402 specs/transports-v2/mcp.md, read at commit 457c163): an unpaid
// tools/call is answered with a tool result `isError: true` holding the PaymentRequired (structuredContent,
// and `{"x402/error":{code:402,…}}` in content[0].text); a paid one gets the settlement in its result's
// `_meta["x402/payment-response"]`, written into the server's JSON or SSE answer on its way out.
import { StringDecoder } from 'node:string_decoder'
import type { AnswerRewriter, BodyAnswer } from '../pricing/body-price.ts'
import type { MppProblem } from '../schemes/mpp-charge/problems.ts'
import { MPP_PAYMENT_REQUIRED, MPP_RECEIPT } from './json-rpc.ts'

/** The most of a plain JSON answer held to add the receipt; a longer one passes unchanged. */
const JSON_HOLD_MAX_CHARS = 4 * 1024 * 1024

/**
 * The unpaid call's answer in band. `extension`: the request advertised `org.x402/payment` (MCP 2026-07-28):
 * a `payment_required` result holding the PaymentRequired. Otherwise the tool-result binding: a tool result
 * with isError; `resultType` adds `resultType: "complete"` to it, as MCP 2026-07-28 results carry.
 */
export function paymentRequiredResult(
  id: string | number | null,
  paymentRequiredJson: string,
  binding: { extension: boolean; resultType: boolean } = { extension: false, resultType: false },
  mppChallenge: string | null = null,
  mppProblem: MppProblem | null = null,
): BodyAnswer {
  const required = JSON.parse(paymentRequiredJson) as { error?: string; accepts?: unknown[] }
  // A refused MPP credential, or a call no x402 client could pay (x402 turned off): the MPP MCP transport's
  // own JSON-RPC error, as mppx's MCP server answers.
  if (mppChallenge !== null && (mppProblem !== null || required.accepts?.length === 0))
    return mppPaymentError(id, mppChallenge, mppProblem)
  // MPP's challenges beside x402's, where mppx's MCP client reads them (a result's _meta).
  const _meta =
    mppChallenge === null
      ? undefined
      : { [MPP_PAYMENT_REQUIRED]: { challenges: mppChallenges(mppChallenge) } }
  if (binding.extension)
    return {
      status: '200 OK',
      contentType: 'application/json',
      body: JSON.stringify({
        jsonrpc: '2.0',
        id,
        result: { resultType: 'payment_required', paymentRequired: required, _meta },
      }),
    }
  const wrapped = {
    'x402/error': { code: 402, message: required.error ?? 'payment_required', data: required },
  }
  return {
    // A JSON-RPC answer: the HTTP exchange itself succeeded.
    status: '200 OK',
    contentType: 'application/json',
    body: JSON.stringify({
      jsonrpc: '2.0',
      id,
      result: {
        ...(binding.resultType ? { resultType: 'complete' } : {}),
        isError: true,
        structuredContent: required,
        content: [{ type: 'text', text: JSON.stringify(wrapped) }],
        _meta,
      },
    }),
  }
}

/**
 * The MPP MCP transport's payment error: -32042 (payment required) with the challenges in `error.data`, or,
 * answering a refused credential, the problem's code (-32043 did not verify, -32602 not a credential) with a
 * fresh challenge and the problem. mppx's MCP client pays again on -32042 and -32043.
 */
export function mppPaymentError(
  id: string | number | null,
  mppChallenge: string,
  problem: MppProblem | null,
): BodyAnswer {
  const challenges = mppChallenges(mppChallenge)
  const details = {
    type: problem?.type ?? 'https://paymentauth.org/problems/payment-required',
    title: problem?.title ?? 'Payment Required',
    status: problem?.status ?? 402,
    detail: problem?.detail ?? 'Payment is required.',
    challengeId: challenges[0]?.id,
  }
  const error = {
    code: problem?.rpcCode ?? -32042,
    message: problem === null ? 'Payment Required' : problem.detail,
    data: { httpStatus: details.status, challenges, problem: details },
  }
  return {
    status: '200 OK',
    contentType: 'application/json',
    body: JSON.stringify({ jsonrpc: '2.0', id, error }),
  }
}

/** Adds `_meta["x402/payment-response"]` to the result answering request `id`, in JSON or SSE. */
export function receiptRewriter(id: string | number | null, settlement: unknown): ResultRewriter {
  return new ResultRewriter(id, withReceipt(settlement))
}

/** Adds the settlement to a result's `_meta["x402/payment-response"]`. */
export function withReceipt(settlement: unknown): (result: Record<string, unknown>) => void {
  return (result) => {
    const meta = (typeof result._meta === 'object' && result._meta !== null ? result._meta : {}) as object
    result._meta = { ...meta, 'x402/payment-response': settlement }
  }
}

/**
 * Adds MPP's receipt to a result's `_meta["org.paymentauth/receipt"]`, with the id of the challenge the
 * credential answered (as mppx's MCP server writes it).
 */
export function withMppReceipt(
  receipt: Record<string, unknown>,
  credential: string,
): (result: Record<string, unknown>) => void {
  let challengeId: unknown
  try {
    challengeId = JSON.parse(
      Buffer.from(credential.replace(/^Payment\s+/i, ''), 'base64url').toString('utf8'),
    ).challenge?.id
  } catch {}
  return (result) => {
    const meta = (typeof result._meta === 'object' && result._meta !== null ? result._meta : {}) as object
    result._meta = { ...meta, [MPP_RECEIPT]: { ...receipt, challengeId } }
  }
}

/**
 * The MPP challenges of a `WWW-Authenticate` value as the MPP MCP transport carries them: objects, the
 * request decoded (mppx's client reads `_meta["org.paymentauth/payment-required"].challenges`).
 */
export function mppChallenges(header: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = []
  for (const one of header.split(/,\s*(?=Payment\s)/)) {
    const c: Record<string, unknown> = {}
    for (const m of one.matchAll(/(\w+)="([^"]*)"/g)) c[m[1]!] = m[2]
    if (typeof c.request !== 'string') continue
    c.request = JSON.parse(Buffer.from(c.request, 'base64url').toString('utf8'))
    out.push(c)
  }
  return out
}

/** Changes the result answering request `id` on its way out, in a JSON or an SSE answer. */
export class ResultRewriter implements AnswerRewriter {
  private sse = false
  private decoder = new StringDecoder('utf8')
  private held = ''
  private overflow = false

  constructor(
    private readonly id: string | number | null,
    private readonly edit: (result: Record<string, unknown>) => void,
  ) {}

  onHead(head: Buffer[]): void {
    for (let i = 0; i < head.length; i += 2)
      if (head[i]!.toString('latin1').toLowerCase() === 'content-type')
        this.sse = head[i + 1]!.toString('latin1').toLowerCase().includes('text/event-stream')
  }

  onData(chunk: Buffer): Buffer {
    if (this.overflow) return chunk
    this.held += this.decoder.write(chunk)
    if (!this.sse) {
      if (this.held.length <= JSON_HOLD_MAX_CHARS) return EMPTY
      this.overflow = true
      const all = Buffer.from(this.held)
      this.held = ''
      return all
    }
    // SSE: pass every complete event on (the one answering the call with the receipt), hold the rest.
    const end = Math.max(this.held.lastIndexOf('\n\n'), this.held.lastIndexOf('\r\n\r\n'))
    if (end < 0) return EMPTY
    const cut = this.held[end] === '\r' ? end + 4 : end + 2
    const done = this.held.slice(0, cut)
    this.held = this.held.slice(cut)
    return Buffer.from(
      done.replace(/^data: ?(.*)$/gm, (line, data: string) => this.withReceipt(data) ?? line),
    )
  }

  onEnd(): Buffer | null {
    const rest = this.held + this.decoder.end()
    this.held = ''
    if (this.overflow || rest.length === 0) return rest.length === 0 ? null : Buffer.from(rest)
    if (this.sse) return Buffer.from(rest)
    return Buffer.from(this.withReceipt(rest, false) ?? rest)
  }

  /** The message with its result changed, or null when it is not the answer to the call. */
  private withReceipt(text: string, sse = true): string | null {
    let msg: Record<string, unknown>
    try {
      msg = JSON.parse(text)
    } catch {
      return null
    }
    if (typeof msg !== 'object' || msg === null || msg.id !== this.id) return null
    const result = msg.result as Record<string, unknown> | undefined
    if (typeof result !== 'object' || result === null) return null
    this.edit(result)
    return sse ? `data: ${JSON.stringify(msg)}` : JSON.stringify(msg)
  }
}

const EMPTY = Buffer.alloc(0)
