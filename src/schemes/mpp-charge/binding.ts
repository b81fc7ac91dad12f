// What MPP adds to an EIP-3009 authorization, for whoever takes one (the metered scheme, the hosted checkout):
// its challenge (WWW-Authenticate: Payment, HMAC-bound, stateless) and the check of a credential against it
// (the binding, the expiry, our terms, the nonce bound to the challenge). What is left is an x402 `exact`
// payload for the one verifier (signature, validity window, nonce unused on chain, balance).
import { timingSafeEqual } from 'node:crypto'
import { getAddress, toHex } from 'viem'
import { keccakBytes } from '../../chain/keccak.ts'
import type { Logger } from '../../observability/logger.ts'
import type { MppOffer } from './challenge.ts'
import { challengeId, challengeKey, MPP_INTENT, MPP_METHOD, mppOffer } from './challenge.ts'
import { parseAuthorization, parseCredential, parseRequest } from './credential.ts'

/** USDC's decimals: the charge request states them (mppx's client reads amounts in base units anyway). */
const USDC_DECIMALS = 6

export interface MppBindingDeps {
  secrets: { receipt_signing_key: string | null; treasury_private_key: string | null } | undefined
  publicUrl: string | null | undefined
  chainInfo: { chainId: number; usdcAddress: string; treasury: string; x402Network: string }
  logger: Logger
  /**
   * What the challenges are for ('metered', 'checkout'): each purpose its own key, so a challenge issued by
   * one cannot be answered at the other.
   */
  purpose: string
}

/** The refusal of a credential, by the spec's problem names. */
export type MppRefusal =
  | 'malformed_credential'
  | 'method_unsupported'
  | 'invalid_challenge'
  | 'payment_expired'
  | 'payment_insufficient'
  | 'invalid_payload'

export type MppCheck =
  | { ok: false; reason: MppRefusal }
  /** `exact`: the authorization as an x402 v1 exact payload; `amount`: the challenge's, base units. */
  | { ok: true; exact: Record<string, unknown>; amount: bigint; nonce: `0x${string}` }

/** Requests (base64url) seen in challenges we issued, and their amount or null when the terms are not ours. */
const REQUESTS_KEPT = 1_024

export class MppBinding {
  private readonly key: Buffer
  readonly realm: string
  private readonly currency: string
  private readonly recipient: string
  private readonly recipientLower: string
  /**
   * A charge request's check, by its text: only requests under our HMAC reach it (one per price offered), so
   * the decoding, the schema and the checksummed address comparisons run once per price, not per call.
   */
  private readonly requests = new Map<string, bigint | null>()

  constructor(private readonly deps: MppBindingDeps) {
    // Stateless binding: every instance derives the same key from the deployment's own secret.
    const secret = deps.secrets?.receipt_signing_key ?? deps.secrets?.treasury_private_key ?? null
    if (secret === null)
      deps.logger.warn(
        'MPP challenges are bound with a per-process key (no RECEIPT_SIGNING_KEY nor TREASURY_PRIVATE_KEY): another instance cannot verify them',
      )
    const base = secret ?? toHex(crypto.getRandomValues(new Uint8Array(32)))
    this.key = challengeKey(deps.purpose === 'metered' ? base : `${deps.purpose}\0${base}`)
    this.realm = deps.publicUrl ? new URL(deps.publicUrl).host : 'tollgate'
    this.currency = getAddress(deps.chainInfo.usdcAddress)
    this.recipient = getAddress(deps.chainInfo.treasury)
    this.recipientLower = this.recipient.toLowerCase()
  }

  /** The challenge of one amount (base units), valid for `expiresInMs` from each answer. */
  offer(amountAtomic: bigint, expiresInMs: number): MppOffer {
    return mppOffer(this.key, {
      realm: this.realm,
      amountAtomic,
      currency: this.currency,
      recipient: this.recipient,
      chainId: this.deps.chainInfo.chainId,
      decimals: USDC_DECIMALS,
      expiresInMs,
    })
  }

  /** Checks a credential (the base64url token after `Payment `) issued by us, unchanged, unexpired, ours. */
  check(token: string, nowMs: number): MppCheck {
    const credential = parseCredential(token)
    if (credential === null) return { ok: false, reason: 'malformed_credential' }
    const c = credential.challenge
    if (c.method !== MPP_METHOD || c.intent !== MPP_INTENT) return { ok: false, reason: 'method_unsupported' }
    // Issued by this deployment, unchanged: the id is our HMAC over what the client echoed.
    const expected = challengeId(this.key, {
      realm: c.realm,
      method: c.method,
      intent: c.intent,
      request: c.request,
      expires: c.expires ?? '',
      digest: c.digest ?? '',
      opaque: c.opaque ?? '',
    })
    if (!sameText(expected, c.id)) return { ok: false, reason: 'invalid_challenge' }
    const expiresMs = c.expires === undefined ? Number.NaN : Date.parse(c.expires)
    if (!(expiresMs > nowMs)) return { ok: false, reason: 'payment_expired' }
    const amount = this.requestAmount(c.request)
    if (amount === null) return { ok: false, reason: 'invalid_challenge' }
    const a = parseAuthorization(credential.payload)
    if (a === null) return { ok: false, reason: 'invalid_payload' }
    if (a.value !== amount.toString()) return { ok: false, reason: 'payment_insufficient' }
    if (a.to.toLowerCase() !== this.recipientLower) return { ok: false, reason: 'invalid_payload' }
    // The nonce is the challenge's: an authorization signed for one challenge cannot answer another.
    const nonce = challengeNonce(c.id, c.realm)
    if (a.nonce.toLowerCase() !== nonce) return { ok: false, reason: 'invalid_challenge' }
    const exact = {
      x402Version: 1,
      scheme: 'exact',
      network: this.deps.chainInfo.x402Network,
      payload: {
        signature: a.signature,
        authorization: {
          from: a.from,
          to: a.to,
          value: a.value,
          validAfter: a.validAfter,
          validBefore: a.validBefore,
          nonce: a.nonce,
        },
      },
    }
    return { ok: true, exact, amount, nonce }
  }

  /** The amount of a charge request issued under our key, or null when its terms are not ours. */
  private requestAmount(text: string): bigint | null {
    const known = this.requests.get(text)
    if (known !== undefined) return known
    const request = parseRequest(text)
    // The terms are ours (a secret shared with another deployment on another chain would still be refused).
    const amount =
      request !== null &&
      request.methodDetails.chainId === this.deps.chainInfo.chainId &&
      getAddress(request.currency) === this.currency &&
      getAddress(request.recipient) === this.recipient
        ? BigInt(request.amount)
        : null
    if (this.requests.size >= REQUESTS_KEPT) this.requests.clear()
    this.requests.set(text, amount)
    return amount
  }
}

/** The EIP-3009 nonce mppx signs for a challenge: keccak256(id + realm), lowercase 0x-hex. */
export function challengeNonce(id: string, realm: string): `0x${string}` {
  const hash = keccakBytes(`${id}${realm}`)
  return `0x${Buffer.from(hash.buffer, hash.byteOffset, hash.byteLength).toString('hex')}`
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}
