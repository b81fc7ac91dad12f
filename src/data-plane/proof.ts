// Parses the payment header (x-payment / X-PAYMENT / PAYMENT-SIGNATURE) into one Proof union.

export type Proof =
  | { kind: 'tx'; hash: `0x${string}`; key: string }
  | { kind: 'x402'; raw: string; payload: unknown; version: 1 | 2 }
  | { kind: 'invalid'; detail: string }

const TX_HASH = /^0x[0-9a-fA-F]{64}$/

export function parseProof(header: string): Proof {
  const value = header.trim()
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
