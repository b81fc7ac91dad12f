// The 402 payment requirement: body (seed fields + x402 v1 `accepts`) and the x402 v2 PAYMENT-REQUIRED
// header, built once per endpoint version; only the reason and the quote's expiry vary per answer (the v2
// header carries the reason too: one encoded header per reason, built the first time that reason is used).
import { toDollars } from '../money.ts'

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

/** The x402 v2 requirement as advertised (`accepts[0]`): what a v2 payload's `accepted` must equal. */
export interface V2Requirement {
  scheme: 'exact'
  network: string
  amount: string
  asset: string
  payTo: string
  maxTimeoutSeconds: number
  extra: { name: string; version: string }
}

export interface Challenge {
  /** JSON text after the varying fields, starting with ',' and ending with '}'. */
  rest: string
  /** The v2 requirement, kept for matching `accepted` (src/data-plane/accepted-match.ts). */
  v2: V2Requirement
  /** JSON text of the v2 PaymentRequired after its `error` field, starting with ','. */
  v2Rest: string
  /** base64 PAYMENT-REQUIRED headers by reason, filled lazily (reasons are a closed set of codes). */
  v2Headers: Map<string, string>
}

export interface ChallengeInput {
  resourceUrl: string
  description: string
  priceAtomic: bigint
  /** endpoint_id or payment_id */
  idField: 'endpoint_id' | 'payment_id'
  id: string
  maxTimeoutSeconds: number
  /** issue 12: also offer x402 `batch-settlement` (the endpoint's owner turned it on). */
  batch?: { withdrawDelay: number }
}

export function buildChallenge(chain: ChallengeChain, input: ChallengeInput): Challenge {
  const amount = input.priceAtomic.toString()
  const extra = { name: chain.usdcName, version: chain.usdcVersion }
  const fields = {
    price: toDollars(input.priceAtomic),
    price_atomic: amount,
    recipient: chain.treasury,
    currency: 'USDC',
    asset: chain.usdcAddress,
    network: chain.network,
    chain_id: chain.chainId,
    [input.idField]: input.id,
    x402Version: 1,
    accepts: [
      {
        scheme: 'exact',
        network: chain.x402Network,
        maxAmountRequired: amount,
        resource: input.resourceUrl,
        description: input.description,
        mimeType: 'application/json',
        payTo: chain.treasury,
        maxTimeoutSeconds: input.maxTimeoutSeconds,
        asset: chain.usdcAddress,
        extra,
      },
    ],
  }
  const v2: V2Requirement = {
    scheme: 'exact',
    network: chain.caip2,
    amount,
    asset: chain.usdcAddress,
    payTo: chain.treasury,
    maxTimeoutSeconds: input.maxTimeoutSeconds,
    extra,
  }
  const v2Rest = {
    resource: { url: input.resourceUrl, description: input.description, mimeType: 'application/json' },
    accepts: [
      v2,
      // --- x402 batch-settlement offer (issue 12; src/data-plane/batch-voucher.ts serves it) ---
      ...(input.batch
        ? [batchAccept(chain, amount, input.maxTimeoutSeconds, input.batch.withdrawDelay)]
        : []),
    ],
  }
  return {
    rest: `,${JSON.stringify(fields).slice(1)}`,
    v2,
    v2Rest: `,${JSON.stringify(v2Rest).slice(1)}`,
    v2Headers: new Map(),
  }
}

/** The scheme's requirements: tollgate's treasury is both the receiver and the receiver's authorizer. */
export function batchAccept(
  chain: ChallengeChain,
  amount: string,
  maxTimeoutSeconds: number,
  withdrawDelay: number,
) {
  return {
    scheme: 'batch-settlement',
    network: chain.caip2,
    amount,
    asset: chain.usdcAddress,
    payTo: chain.treasury,
    maxTimeoutSeconds,
    extra: {
      name: chain.usdcName,
      version: chain.usdcVersion,
      receiverAuthorizer: chain.treasury,
      withdrawDelay,
      assetTransferMethod: 'eip3009',
    },
  }
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
 * reason string here (DESIGN §4), not the error object of other answers. Request ids are token characters.
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
