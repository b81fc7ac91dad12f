// The 402 payment requirement: body (seed fields + x402 v1 `accepts`) and the x402 v2 PAYMENT-REQUIRED
// header, built once per endpoint version; only the reason and the quote's expiry vary per answer.
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

export interface Challenge {
  /** JSON text after the varying fields, starting with ',' and ending with '}'. */
  rest: string
  /** base64 of the x402 v2 PaymentRequired object. */
  v2Header: string
}

export interface ChallengeInput {
  resourceUrl: string
  description: string
  priceAtomic: bigint
  /** endpoint_id or payment_id */
  idField: 'endpoint_id' | 'payment_id'
  id: string
  maxTimeoutSeconds: number
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
  const v2 = {
    x402Version: 2,
    resource: { url: input.resourceUrl, description: input.description, mimeType: 'application/json' },
    accepts: [
      {
        scheme: 'exact',
        network: chain.caip2,
        amount,
        asset: chain.usdcAddress,
        payTo: chain.treasury,
        maxTimeoutSeconds: input.maxTimeoutSeconds,
        extra,
      },
    ],
  }
  return {
    rest: `,${JSON.stringify(fields).slice(1)}`,
    v2Header: Buffer.from(JSON.stringify(v2)).toString('base64'),
  }
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
