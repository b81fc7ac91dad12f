// Parses the payment header (x-payment / X-PAYMENT / PAYMENT-SIGNATURE, or an MPP `Authorization: Payment`
// credential) into one Proof union.

export type Proof =
  | { kind: 'tx'; hash: `0x${string}`; key: string }
  | { kind: 'x402'; raw: string; payload: unknown; version: 1 | 2 }
  /** An MPP credential (`Authorization: Payment <base64url JSON>`): decoded by its scheme (src/schemes/mpp-charge/). */
  | { kind: 'mpp'; token: string }
  | { kind: 'invalid'; detail: string }

const TX_HASH = /^0x[0-9a-fA-F]{64}$/

const MPP_PREFIX = /^payment\s+/i

/** The MPP credential in an Authorization header, or '' (another scheme's Authorization is not a payment). */
export function mppCredential(authorization: string): string {
  return MPP_PREFIX.test(authorization.trimStart()) ? authorization.trim() : ''
}

export function parseProof(header: string): Proof {
  const value = header.trim()
  const mpp = MPP_PREFIX.exec(value)
  if (mpp !== null) return { kind: 'mpp', token: value.slice(mpp[0].length) }
  if (TX_HASH.test(value)) {
    const hash = value.toLowerCase() as `0x${string}`
    return { kind: 'tx', hash, key: `tx:${hash}` }
  }
  if (value.length > 16 && value.length < 16384 && /^[A-Za-z0-9+/=_-]+$/.test(value)) {
    try {
      const payload = JSON.parse(Buffer.from(value, 'base64').toString('utf8'))
      if (payload && typeof payload === 'object') {
        return { kind: 'x402', raw: value, payload, version: payload.x402Version === 2 ? 2 : 1 }
      }
    } catch {
      // fall through: not base64 JSON
    }
  }
  return {
    kind: 'invalid',
    detail: 'x-payment must be a transaction hash (0x + 64 hex) or a base64 x402 payload',
  }
}
