// The MPP credential (`Authorization: Payment <base64url JSON>`) of the `evm` charge method, validated once
// at the boundary: the challenge the client echoes and its EIP-3009 authorization payload.
import * as v from 'valibot'

const Address = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{40}$/))
const Uint = v.pipe(v.string(), v.regex(/^\d{1,78}$/))

const Challenge = v.object({
  id: v.pipe(v.string(), v.minLength(1), v.maxLength(128)),
  realm: v.pipe(v.string(), v.maxLength(256)),
  method: v.pipe(v.string(), v.maxLength(64)),
  intent: v.pipe(v.string(), v.maxLength(64)),
  request: v.pipe(v.string(), v.maxLength(16_384)),
  expires: v.optional(v.string()),
  digest: v.optional(v.string()),
  opaque: v.optional(v.pipe(v.string(), v.maxLength(1_024))),
})

const Payload = v.object({
  type: v.string(),
  from: Address,
  to: Address,
  value: Uint,
  validAfter: Uint,
  validBefore: Uint,
  nonce: v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{64}$/)),
  signature: v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{2,2048}$/)),
})

const Credential = v.object({
  challenge: Challenge,
  payload: v.unknown(),
  source: v.optional(v.string()),
})

const Request = v.object({
  amount: Uint,
  currency: Address,
  recipient: Address,
  methodDetails: v.object({ chainId: v.number() }),
})

export type MppCredential = v.InferOutput<typeof Credential>
export type AuthorizationPayload = v.InferOutput<typeof Payload>
export type ChargeRequest = v.InferOutput<typeof Request>

function decodeJson(token: string): unknown {
  if (token.length > 32_768 || !/^[A-Za-z0-9_=+/-]+$/.test(token)) return null
  try {
    return JSON.parse(Buffer.from(token, 'base64url').toString('utf8'))
  } catch {
    return null
  }
}

/** The credential, or null when it is not base64url JSON of the credential's shape. */
export function parseCredential(token: string): MppCredential | null {
  const r = v.safeParse(Credential, decodeJson(token))
  return r.success ? r.output : null
}

/** The `evm` charge authorization payload, or null. */
export function parseAuthorization(payload: unknown): AuthorizationPayload | null {
  const r = v.safeParse(Payload, payload)
  return r.success && r.output.type === 'authorization' ? r.output : null
}

/** The charge request the challenge carried (base64url canonical JSON), or null. */
export function parseRequest(request: string): ChargeRequest | null {
  const r = v.safeParse(Request, decodeJson(request))
  return r.success ? r.output : null
}
