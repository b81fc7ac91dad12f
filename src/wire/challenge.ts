// The 402 payment requirement: body (seed fields + x402 v1 `accepts`) and the x402 v2 PAYMENT-REQUIRED
// header, built once per endpoint version; only the reason and the quote's expiry vary per answer (the v2
// header carries the reason too: one encoded header per reason, built the first time that reason is used).
import type { MppOffer, MppProblem } from '../schemes/mpp-charge/challenge.ts'

/** The x402 extension whose id lets a retry get the first answer again (src/data-plane/paid-answers.ts). */
export const PAYMENT_IDENTIFIER = 'payment-identifier'

/** A scheme's part of a 402: any of the three places an offer can appear. */
export interface Offer {
  /** Fields of the 402 JSON body (the seed's transaction-hash terms). */
  body?: Record<string, unknown>
  /** An x402 v1 `accepts` entry (the body's). */
  v1?: Record<string, unknown>
  /** An x402 v2 `accepts` entry (the PAYMENT-REQUIRED header's). */
  v2?: Requirement
  /** An MPP challenge (a `WWW-Authenticate: Payment` value): its fixed part built here, its id per answer. */
  mpp?: MppOffer
  /** x402 extensions the scheme declares with its requirement (upto: eip2612GasSponsoring), by name. */
  extensions?: Record<string, unknown>
}

/** An x402 v2 payment requirement as advertised. */
export interface Requirement {
  scheme: string
  network: string
  amount: string
  asset: string
  payTo: string
  maxTimeoutSeconds: number
  extra: Record<string, unknown>
}

export interface ChallengeChain {
  network: string
  chainId: number
  x402Network: string
  caip2: string
  treasury: string
  usdcAddress: string
  usdcName: string
  usdcVersion: string
}

export interface Challenge {
  /** JSON text after the varying fields, starting with ',' and ending with '}'. */
  rest: string
  /** The x402 v2 requirements as advertised: what a v2 payload's `accepted` must equal. */
  accepts: Requirement[]
  /** JSON text of the v2 PaymentRequired after its `error` field, starting with ','. */
  v2Rest: string
  /** base64 PAYMENT-REQUIRED headers by reason, filled lazily (reasons are a closed set of codes). */
  v2Headers: Map<string, string>
  /** MPP challenges offered beside x402 (WWW-Authenticate: Payment), in registration order. */
  mpp?: readonly MppOffer[]
}

export interface ChallengeInput {
  resourceUrl: string
  description: string
  /** endpoint_id or payment_id */
  idField: 'endpoint_id' | 'payment_id'
  id: string
  /** Each offering scheme's part, in registration order (src/schemes/registry.ts). */
  offers: Offer[]
  /** Schemes that exist but are not offered here, and why: a client should not try them. */
  notOffered?: Array<{ scheme: string; reason: string }>
  /** How the endpoint prices a call, when it is not one fixed price (rules, usage). */
  pricing?: Record<string, unknown>
  /** x402 v2 resource additions a catalog reads (serviceName, tags, iconUrl). */
  resourceMetadata?: Record<string, unknown>
  /** x402 extensions offered with the 402 (bazaar, …), keyed by name; in the v2 header and the body. */
  extensions?: Record<string, unknown>
}

/** The 402 of one price: the schemes' offers assembled once, the reason and expiry added per answer. */
export function buildChallenge(input: ChallengeInput): Challenge {
  const fields: Record<string, unknown> = {}
  const v1: Array<Record<string, unknown>> = []
  const accepts: Requirement[] = []
  const mpp: MppOffer[] = []
  let extensions = input.extensions
  for (const offer of input.offers) {
    if (offer.extensions) extensions = { ...extensions, ...offer.extensions }
    if (offer.mpp) mpp.push(offer.mpp)
    if (offer.body) Object.assign(fields, offer.body)
    if (offer.v1) v1.push({ ...offer.v1, resource: input.resourceUrl, description: input.description })
    if (offer.v2) accepts.push(offer.v2)
  }
  fields[input.idField] = input.id
  fields.x402Version = 1
  fields.accepts = v1.map(v1Order)
  if (input.pricing) fields.pricing = input.pricing
  if (input.notOffered && input.notOffered.length > 0) fields.schemes_not_offered = input.notOffered
  const hasExtensions = extensions !== undefined && Object.keys(extensions).length > 0
  if (hasExtensions) fields.extensions = extensions
  const v2Rest: Record<string, unknown> = {
    resource: {
      url: input.resourceUrl,
      description: input.description,
      mimeType: 'application/json',
      ...input.resourceMetadata,
    },
    accepts,
    // A client may name its payment (payment-identifier): a retry after a lost answer gets the answer again.
    extensions: { ...extensions, [PAYMENT_IDENTIFIER]: PAYMENT_IDENTIFIER_DECLARATION },
  }
  return {
    rest: `,${JSON.stringify(fields).slice(1)}`,
    accepts,
    v2Rest: `,${JSON.stringify(v2Rest).slice(1)}`,
    v2Headers: new Map(),
    mpp,
  }
}

/** The WWW-Authenticate value of one 402 (every MPP challenge, comma-separated as RFC 9110 lists them), or null. */
export function mppHeader(challenge: Challenge, nowMs: number): string | null {
  const offers = challenge.mpp
  if (offers === undefined || offers.length === 0) return null
  if (offers.length === 1) return offers[0]!.header(nowMs)
  return offers.map((o) => o.header(nowMs)).join(', ')
}

/**
 * How the spec names the refusal of an MPP credential for `reason`, when the 402 offers MPP (else null: the
 * endpoint turned MPP off, and its plain 402 says so).
 */
export function mppProblem(challenge: Challenge, reason: string): MppProblem | null {
  const offer = challenge.mpp?.[0]
  return offer === undefined ? null : offer.problem(reason)
}

/**
 * Whether the first 402 is answered as an RFC 9457 problem (`payment-required`, application/problem+json):
 * the client speaks the Payment scheme (`Accept-Payment`, which mppx's fetch sends with every first request)
 * or asked for problem details (`Accept`). Anyone else gets the x402 body as it always was: x402 v1 clients
 * read it, and mppx's own x402 integration answers a dual 402 with x402's body too. The problem body keeps
 * every x402 member after the problem's, so a client reading either finds its own.
 */
export function wantsProblem(acceptPayment: string, accept: string): boolean {
  return acceptPayment !== '' || accept.includes('application/problem+json')
}

/**
 * An RFC 9457 problem body (application/problem+json) answering a refused MPP credential: the spec's members
 * first, the id of the fresh challenge in `WWW-Authenticate`, then the 402 body's own members (`error`, the
 * x402 terms) as extension members. `body` is a JSON object's text.
 */
export function problemBody(problem: MppProblem, header: string, body: string): string {
  const id = /^Payment id="([^"]*)"/.exec(header)?.[1]
  const members = {
    type: problem.type,
    title: problem.title,
    status: problem.status,
    detail: problem.detail,
    ...(id === undefined ? {} : { challengeId: id }),
  }
  return `${JSON.stringify(members).slice(0, -1)},${body.slice(1)}`
}

// The v1 entry's field order as the `x402` package prints it (resource and description after the amount).
function v1Order(e: Record<string, unknown>): Record<string, unknown> {
  const { scheme, network, maxAmountRequired, resource, description, ...rest } = e
  return { scheme, network, maxAmountRequired, resource, description, ...rest }
}

/**
 * The PAYMENT-REQUIRED header for one reason: x402 v2 clients read why they were refused from its `error`
 * (the reference server sends one per answer too). Reasons are wire codes (snake_case, no escaping needed).
 */
export function v2Header(challenge: Challenge, reason: string): string {
  let header = challenge.v2Headers.get(reason)
  if (header === undefined) {
    header = Buffer.from(`{"x402Version":2,"error":"${reason}"${challenge.v2Rest}`).toString('base64')
    challenge.v2Headers.set(reason, header)
  }
  return header
}

/**
 * The 402 body: error reason, request id and quote expiry first, then the precomputed fields. `error` is a
 * reason string here (the seed 402 shape), not the error object of other answers. Request ids are token characters.
 */
export function challengeBody(
  challenge: Challenge,
  reason: string,
  expiresAtIso: string,
  requestId: string,
): string {
  return `{"error":"${reason}","request_id":"${requestId}","expires_at":"${expiresAtIso}"${challenge.rest}`
}

let isoCacheSecond = -1
let isoCacheTtl = -1
let isoCacheValue = ''
/** now + ttl as ISO text, recomputed at most once a second (the 402 path is hot). */
export function quoteExpiry(ttlMs: number, nowMs = Date.now()): string {
  const second = Math.floor(nowMs / 1000)
  if (second !== isoCacheSecond || ttlMs !== isoCacheTtl) {
    isoCacheSecond = second
    isoCacheTtl = ttlMs
    isoCacheValue = new Date(second * 1000 + ttlMs).toISOString()
  }
  return isoCacheValue
}

/** The payment-identifier extension as @x402/extensions declares it (optional for the client). */
const PAYMENT_IDENTIFIER_DECLARATION = {
  info: { required: false },
  schema: {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    properties: {
      required: { type: 'boolean' },
      id: { type: 'string', minLength: 16, maxLength: 128, pattern: '^[a-zA-Z0-9_-]+$' },
    },
    required: ['required'],
  },
}
