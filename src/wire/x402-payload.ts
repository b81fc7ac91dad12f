// The x402 "exact" EVM payload (v1 in X-PAYMENT, v2 in PAYMENT-SIGNATURE), validated once at the boundary.
import * as v from 'valibot'

const Hex = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]*$/))
const Address = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{40}$/))
const Uint = v.pipe(
  v.union([v.string(), v.number()]),
  v.transform((x): string => String(x)),
  v.regex(/^\d{1,78}$/),
  v.transform((x) => BigInt(x)),
)

const ExactEvm = v.object({
  signature: Hex,
  authorization: v.object({
    from: Address,
    to: Address,
    value: Uint,
    validAfter: Uint,
    validBefore: Uint,
    nonce: v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{64}$/)),
  }),
})

const V1 = v.object({ x402Version: v.literal(1), scheme: v.string(), network: v.string(), payload: ExactEvm })
const V2 = v.object({
  x402Version: v.literal(2),
  accepted: v.object({ scheme: v.string(), network: v.string() }),
  payload: ExactEvm,
})

export interface ExactPayment {
  version: 1 | 2
  scheme: string
  /** v1 network name ('base-sepolia') or CAIP-2 id ('eip155:84532'). */
  network: string
  signature: `0x${string}`
  authorization: {
    from: `0x${string}`
    to: `0x${string}`
    value: bigint
    validAfter: bigint
    validBefore: bigint
    nonce: `0x${string}`
  }
}

export function parseExactPayment(payload: unknown): ExactPayment | null {
  const v1 = v.safeParse(V1, payload)
  if (v1.success) {
    const o = v1.output
    return {
      version: 1,
      scheme: o.scheme,
      network: o.network,
      ...(o.payload as Omit<ExactPayment, 'version' | 'scheme' | 'network'>),
    }
  }
  const v2 = v.safeParse(V2, payload)
  if (v2.success) {
    const o = v2.output
    return {
      version: 2,
      scheme: o.accepted.scheme,
      network: o.accepted.network,
      ...(o.payload as Omit<ExactPayment, 'version' | 'scheme' | 'network'>),
    }
  }
  return null
}
