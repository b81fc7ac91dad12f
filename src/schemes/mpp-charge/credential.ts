// The MPP credential (`Authorization: Payment <base64url JSON>`) of the `evm` charge method, validated once
// at the boundary: the challenge the client echoes and its EIP-3009 authorization payload. The credential
// and its payload are checked by hand (they are read on every paid call: valibot's object schemas cost about
// as much again as the decoding); the charge request, read once per price, keeps its schema.
import * as v from 'valibot'

const ADDRESS = /^0x[0-9a-fA-F]{40}$/
const UINT = /^\d{1,78}$/
const NONCE = /^0x[0-9a-fA-F]{64}$/
const SIGNATURE = /^0x[0-9a-fA-F]{2,2048}$/

const Address = v.pipe(v.string(), v.regex(ADDRESS))
const Uint = v.pipe(v.string(), v.regex(UINT))

const Request = v.object({
  amount: Uint,
  currency: Address,
  recipient: Address,
  methodDetails: v.object({ chainId: v.number() }),
})

/** The challenge as the client echoes it (absent optional parameters undefined). */
export interface EchoedChallenge {
  id: string
  realm: string
  method: string
  intent: string
  request: string
  expires?: string
  digest?: string
  opaque?: string
}

export interface MppCredential {
  challenge: EchoedChallenge
  payload: unknown
  source?: string
}

export interface AuthorizationPayload {
  type: string
  from: string
  to: string
  value: string
  validAfter: string
  validBefore: string
  nonce: string
  signature: string
}

export type ChargeRequest = v.InferOutput<typeof Request>

function decodeJson(token: string): unknown {
  if (token.length > 32_768 || !/^[A-Za-z0-9_=+/-]+$/.test(token)) return null
  try {
    return JSON.parse(Buffer.from(token, 'base64url').toString('utf8'))
  } catch {
    return null
  }
}

type Fields = Record<string, unknown>

function isObject(x: unknown): x is Fields {
  return typeof x === 'object' && x !== null && !Array.isArray(x)
}

/** A string of at most `max` characters (and at least `min`). */
function text(x: unknown, max: number, min = 0): x is string {
  return typeof x === 'string' && x.length <= max && x.length >= min
}

function optionalText(x: unknown, max: number): boolean {
  return x === undefined || text(x, max)
}

function matches(x: unknown, pattern: RegExp): x is string {
  return typeof x === 'string' && pattern.test(x)
}

/** The credential, or null when it is not base64url JSON of the credential's shape. */
export function parseCredential(token: string): MppCredential | null {
  const o = decodeJson(token)
  if (!isObject(o) || !isObject(o.challenge) || !optionalText(o.source, Number.POSITIVE_INFINITY)) return null
  const c = o.challenge
  if (
    !text(c.id, 128, 1) ||
    !text(c.realm, 256) ||
    !text(c.method, 64) ||
    !text(c.intent, 64) ||
    !text(c.request, 16_384) ||
    !optionalText(c.expires, Number.POSITIVE_INFINITY) ||
    !optionalText(c.digest, Number.POSITIVE_INFINITY) ||
    !optionalText(c.opaque, 1_024)
  )
    return null
  const challenge: EchoedChallenge = {
    id: c.id,
    realm: c.realm,
    method: c.method,
    intent: c.intent,
    request: c.request,
    expires: c.expires as string | undefined,
    digest: c.digest as string | undefined,
    opaque: c.opaque as string | undefined,
  }
  return { challenge, payload: o.payload, source: o.source as string | undefined }
}

/** The `evm` charge authorization payload, or null. */
export function parseAuthorization(p: unknown): AuthorizationPayload | null {
  if (
    !isObject(p) ||
    p.type !== 'authorization' ||
    !matches(p.from, ADDRESS) ||
    !matches(p.to, ADDRESS) ||
    !matches(p.value, UINT) ||
    !matches(p.validAfter, UINT) ||
    !matches(p.validBefore, UINT) ||
    !matches(p.nonce, NONCE) ||
    !matches(p.signature, SIGNATURE)
  )
    return null
  return {
    type: p.type,
    from: p.from,
    to: p.to,
    value: p.value,
    validAfter: p.validAfter,
    validBefore: p.validBefore,
    nonce: p.nonce,
    signature: p.signature,
  }
}

/** The charge request the challenge carried (base64url canonical JSON), or null. */
export function parseRequest(request: string): ChargeRequest | null {
  const r = v.safeParse(Request, decodeJson(request))
  return r.success ? r.output : null
}
