// A refused MPP credential named as the Payment scheme names it: an RFC 9457 problem whose `type` is one of
// the spec's problem types (https://paymentauth.org/problems/…), with the HTTP status the spec gives it
// (method-unsupported is 400, every other refusal 402 with a fresh challenge), and the JSON-RPC error code
// of the MPP MCP transport (-32602 for a credential that is not one, -32043 for one that did not verify,
// -32042 for payment required). The first 402 of a client that speaks MPP (it sent `Accept-Payment`) is the
// spec's `payment-required` problem (the core draft: servers SHOULD send Problem Details with every 402).
// tollgate's own reason (the body's `error`) stays beside it: it says which check refused.

const BASE = 'https://paymentauth.org/problems/'

/** What an answer to a refused MPP credential says, by the spec's problem types. */
export interface MppProblem {
  type: string
  title: string
  status: 400 | 402
  detail: string
  /** The MPP MCP transport's JSON-RPC error code for it. */
  rpcCode: -32602 | -32043 | -32042
}

interface Kind {
  slug: string
  title: string
  status: 400 | 402
  rpcCode: -32602 | -32043 | -32042
}

const REQUIRED: Kind = { slug: 'payment-required', title: 'Payment Required', status: 402, rpcCode: -32042 }

const MALFORMED: Kind = {
  slug: 'malformed-credential',
  title: 'Malformed Credential',
  status: 402,
  rpcCode: -32602,
}
const UNSUPPORTED: Kind = {
  slug: 'method-unsupported',
  title: 'Method Unsupported',
  status: 400,
  rpcCode: -32043,
}
const CHALLENGE: Kind = {
  slug: 'invalid-challenge',
  title: 'Invalid Challenge',
  status: 402,
  rpcCode: -32043,
}
const EXPIRED: Kind = { slug: 'payment-expired', title: 'Payment Expired', status: 402, rpcCode: -32043 }
const INSUFFICIENT: Kind = {
  slug: 'payment-insufficient',
  title: 'Payment Insufficient',
  status: 402,
  rpcCode: -32043,
}
const FAILED: Kind = {
  slug: 'verification-failed',
  title: 'Verification Failed',
  status: 402,
  rpcCode: -32043,
}

/** tollgate's refusal reasons → the spec's problem type, and what to tell the payer. */
const BY_REASON: Record<string, [Kind, string]> = {
  // No credential: the first 402 (only a client that speaks MPP is answered with it).
  payment_required: [REQUIRED, 'this resource requires payment: answer a challenge in WWW-Authenticate'],
  malformed_credential: [MALFORMED, 'the credential is not base64url JSON of a Payment credential'],
  method_unsupported: [UNSUPPORTED, 'only the evm method with the charge intent is accepted'],
  // The spec names an unknown, expired or already used challenge id invalid-challenge.
  invalid_challenge: [CHALLENGE, 'the challenge was not issued by this server with these parameters'],
  proof_already_used: [CHALLENGE, 'this challenge was already paid (the authorization was used once)'],
  payment_expired: [EXPIRED, 'the challenge has expired'],
  authorization_expired: [EXPIRED, 'the authorization is outside its validity window'],
  payment_insufficient: [INSUFFICIENT, 'the amount does not cover the price'],
  insufficient_funds: [FAILED, "the payer's balance does not cover the payment"],
  invalid_payload: [FAILED, 'the payload is not an authorization to the recipient of the challenge'],
  invalid_signature: [FAILED, 'the authorization signature does not verify'],
  protocol_not_accepted: [UNSUPPORTED, 'this endpoint does not accept MPP credentials'],
}

/** The problem of a refusal reason; a reason not named above failed verification. */
export function mppProblem(reason: string): MppProblem {
  const [kind, detail] = BY_REASON[reason] ?? [FAILED, `the payment did not verify (${reason})`]
  return {
    type: `${BASE}${kind.slug}`,
    title: kind.title,
    status: kind.status,
    detail,
    rpcCode: kind.rpcCode,
  }
}
