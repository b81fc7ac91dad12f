// The MPP `evm` charge challenge (WWW-Authenticate: Payment …) of one price, as mppx's server binds it: the
// id is an HMAC-SHA256 (base64url) over realm|method|intent|request|expires|digest|opaque with a server
// secret, so any instance holding the same secret verifies any instance's challenge, with no state.
// The client signs keccak256(id + realm) as the EIP-3009 nonce: every 402 must carry a fresh id, or one
// payer's two calls would sign the same nonce and the second would be refused as a replay. `opaque` holds a
// per-answer serial for that (expiry alone repeats within a millisecond).
import { createHash, createHmac, randomBytes } from 'node:crypto'
import { type MppProblem, mppProblem } from './problems.ts'

export type { MppProblem }

/** An MPP challenge of one price, precomputed but for what each answer binds (expiry, id). */
export interface MppOffer {
  /** The `WWW-Authenticate` value of one answer at `nowMs` (HMAC-bound id, expiry). */
  header(nowMs: number): string
  /** How the spec names the refusal of a credential for `reason` (a tollgate refusal reason). */
  problem(reason: string): MppProblem
  /** What discovery says of it (an `x-payment-info` offer): advisory, the challenge is authoritative. */
  readonly terms: MppOfferTerms
}

/** An offer's terms as the discovery extension lists them: amount in base units, currency the token address. */
export interface MppOfferTerms {
  method: string
  intent: string
  amount: string
  currency: string
}

export const MPP_METHOD = 'evm'
export const MPP_INTENT = 'charge'

export interface MppTerms {
  realm: string
  amountAtomic: bigint
  /** Checksummed token address. */
  currency: string
  /** Checksummed treasury address. */
  recipient: string
  chainId: number
  decimals: number
  /** How long a challenge (and so the authorization signed for it) is valid. */
  expiresInMs: number
}

/** base64url (no padding) of a string. */
export function base64url(text: string): string {
  return Buffer.from(text).toString('base64url')
}

/**
 * The charge request as mppx canonicalizes it (RFC 8785: keys sorted, no spaces), base64url: the client
 * echoes this exact text in its credential, and the id binds it.
 */
export function chargeRequest(t: MppTerms): string {
  return base64url(
    `{"amount":"${t.amountAtomic}","currency":"${t.currency}","methodDetails":{"chainId":${t.chainId},"credentialTypes":["authorization"],"decimals":${t.decimals}},"recipient":"${t.recipient}"}`,
  )
}

/** The HMAC key, derived from a configured secret (the same on every instance of one deployment). */
export function challengeKey(secret: string): Buffer {
  return createHash('sha256').update(`tollgate mpp challenge v1\0${secret}`).digest()
}

/** The challenge id: HMAC over the parameters in mppx's slot order (absent ones as ''). */
export function challengeId(
  key: Buffer,
  c: {
    realm: string
    method: string
    intent: string
    request: string
    expires: string
    digest: string
    opaque: string
  },
): string {
  return createHmac('sha256', key)
    .update(`${c.realm}|${c.method}|${c.intent}|${c.request}|${c.expires}|${c.digest}|${c.opaque}`)
    .digest('base64url')
}

// A per-process random prefix and a counter: unique across instances and answers without a random read each.
const SERIAL_PREFIX = randomBytes(8).toString('hex')
let serial = 0

/** The offer of one price: its fixed text built once, the id, expiry and serial per answer. */
export function mppOffer(key: Buffer, t: MppTerms): MppOffer {
  const request = chargeRequest(t)
  const realm = t.realm
  const fixed = `realm="${realm}", method="${MPP_METHOD}", intent="${MPP_INTENT}", request="${request}"`
  const bound = `${realm}|${MPP_METHOD}|${MPP_INTENT}|${request}|`
  return {
    header(nowMs: number): string {
      const expires = new Date(nowMs + t.expiresInMs).toISOString()
      serial = (serial + 1) % Number.MAX_SAFE_INTEGER
      const opaque = base64url(`{"n":"${SERIAL_PREFIX}${serial.toString(36)}"}`)
      const id = createHmac('sha256', key).update(`${bound}${expires}||${opaque}`).digest('base64url')
      return `Payment id="${id}", ${fixed}, expires="${expires}", opaque="${opaque}"`
    },
    problem: mppProblem,
    terms: {
      method: MPP_METHOD,
      intent: MPP_INTENT,
      amount: t.amountAtomic.toString(),
      currency: t.currency,
    },
  }
}
