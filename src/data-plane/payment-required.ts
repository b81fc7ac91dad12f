// The 402 of a metered call: a missing payment invited, a refused one named, in the forms its client reads
// (the x402 v1 body and v2 PAYMENT-REQUIRED header, the MPP challenge and RFC 9457 problem), or in-band in
// the body of an MCP call (x402's MCP transport). Built here; written by answer-writer.ts.
import type { BodyAnswer, BodyPrice } from '../pricing/body-price.ts'
import type { Quote } from '../schemes/scheme.ts'
import {
  challengeBody,
  mppHeader,
  mppProblem,
  problemBody,
  quoteExpiry,
  v2Header,
} from '../wire/challenge.ts'
import { mppCredential } from '../wire/proof.ts'
import type { LiveEndpoint } from './endpoint-cache.ts'

const JSON_TYPE = 'application/json; charset=utf-8'
/** RFC 9457: the answer to a refused MPP credential, and the first 402 of a client speaking MPP. */
const PROBLEM_TYPE = 'application/problem+json'

/** The call as its 402 reads it. */
export interface RefusedCall {
  readonly quote: Quote | null
  readonly paymentHeader: string
  /** An unpaid request from a client speaking MPP (Accept-Payment): its 402 is a problem (RFC 9457). */
  readonly problemWanted: boolean
  readonly requestId: string
  readonly endpoint: Pick<LiveEndpoint, 'pass'> | null
}

export interface PaymentRequiredAnswer {
  status: 400 | 402
  statusLine: string
  contentType: string
  /** Flat [name, value, …]. */
  headers: string[]
  body: string
}

/** A refused MPP credential is answered as the Payment scheme names the refusal (an RFC 9457 problem). */
function refusedCredential(call: RefusedCall, reason: string) {
  return mppCredential(call.paymentHeader) === '' ? null : mppProblem(call.quote!.challenge, reason)
}

export function paymentRequired(
  call: RefusedCall,
  q: { reason: string; quoteTtlMs: number; retryAfterMs?: number; requiredHeader?: string },
): PaymentRequiredAnswer {
  const { reason } = q
  const challenge = call.quote!.challenge
  const problem = refusedCredential(call, reason)
  const text = challengeBody(challenge, reason, quoteExpiry(q.quoteTtlMs), call.requestId)
  // The same price for MPP clients (Machine Payments Protocol): a fresh challenge with every 402.
  const mpp = mppHeader(challenge, Date.now())
  // The first 402 of a client that speaks MPP is the spec's payment-required problem (x402 members kept).
  const answered =
    problem ?? (reason === 'payment_required' && call.problemWanted ? mppProblem(challenge, reason) : null)
  const problemAnswer = answered !== null && mpp !== null
  // The spec gives method-unsupported a 400 (still with a fresh challenge); every other refusal is a 402.
  const status = problemAnswer && answered.status === 400 ? 400 : 402
  const pass = call.endpoint!.pass
  // The same URL answers differently once paid: no cache may keep a 402 (nor the reason in it). A pass
  // endpoint's 402 carries a fresh sign-in challenge (its nonce is single-use): built per answer.
  const headers = [
    'cache-control',
    'no-store',
    'payment-required',
    q.requiredHeader ?? (pass === null ? v2Header(challenge, reason) : pass.v2Header(challenge, reason)),
  ]
  if (mpp !== null) headers.push('www-authenticate', mpp)
  if (q.retryAfterMs !== undefined)
    headers.push('retry-after', String(Math.max(1, Math.ceil(q.retryAfterMs / 1000))))
  return {
    status,
    statusLine: status === 400 ? '400 Bad Request' : '402 Payment Required',
    contentType: problemAnswer ? PROBLEM_TYPE : JSON_TYPE,
    headers,
    body: problemAnswer ? problemBody(answered, mpp, text) : text,
  }
}

/** Answered in-band (x402 MCP transport): the PaymentRequired the v2 header would carry, in the body. */
export function inBandPaymentRequired(
  call: RefusedCall,
  reason: string,
  answer: NonNullable<Extract<BodyPrice, { ok: 'priced' }>['paymentRequired']>,
): Extract<BodyPrice, { ok: 'refused' }> {
  const challenge = call.quote!.challenge
  const problem = refusedCredential(call, reason)
  const required = `{"x402Version":2,"error":"${reason}"${challenge.v2Rest}`
  const mpp = mppHeader(challenge, Date.now())
  const body: BodyAnswer = answer(required, mpp, problem)
  return { ok: 'refused', ...body }
}
