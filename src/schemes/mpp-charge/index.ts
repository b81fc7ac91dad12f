// MPP (the Machine Payments Protocol) `evm` method, `charge` intent: the client answers a `WWW-Authenticate:
// Payment` challenge with `Authorization: Payment <credential>`, an EIP-3009 transferWithAuthorization to the
// treasury whose nonce is keccak256(challenge id + realm). The same money movement as x402 `exact`: this
// scheme checks what MPP adds (the challenge's HMAC binding and expiry, the nonce bound to it), then hands
// the authorization to the one verifier as an exact payload (signature, validity window, nonce unused on
// chain, the payer's balance), so its claim key is exact's for the same authorization (one cannot pay twice
// through the two protocols), and it settles in the settlement batcher's batches like any exact claim.
// A usage-priced endpoint takes it for the ceiling; the unused part is refunded in the payout batch.
import { timingSafeEqual } from 'node:crypto'
import { getAddress, keccak256, toHex } from 'viem'
import { CORS_HEADERS } from '../../data-plane/cors.ts'
import type { Proof } from '../../data-plane/proof.ts'
import type { VerifyResult } from '../../data-plane/verifier.ts'
import { minimumAccepted } from '../amounts.ts'
import { ClaimedPayment, type ClaimedPaymentDeps, claimedPaymentDeps } from '../claimed-payment.ts'
import type { Offer, OfferQuery, PayQuery, Scheme, SchemeDeps, Verdict } from '../scheme.ts'
import { refusal } from '../verdicts.ts'
import { base64url, challengeId, challengeKey, MPP_INTENT, MPP_METHOD, mppOffer } from './challenge.ts'
import { parseAuthorization, parseCredential, parseRequest } from './credential.ts'

export const MPP_CHARGE = 'mpp-charge'

/** USDC's decimals: the charge request states them (mppx's client reads amounts in base units anyway). */
const USDC_DECIMALS = 6

export function mppChargeScheme(deps: SchemeDeps): Scheme {
  return new MppChargeScheme(deps)
}

class MppChargeScheme implements Scheme {
  readonly name = MPP_CHARGE
  private readonly claimed: ClaimedPaymentDeps
  private readonly key: Buffer
  private readonly realm: string
  private readonly currency: string
  private readonly recipient: string
  private readonly network: string

  constructor(private readonly deps: SchemeDeps) {
    this.claimed = claimedPaymentDeps(deps)
    const secrets = deps.config.secrets
    // Stateless binding: every instance derives the same key from the deployment's own secret.
    const secret = secrets?.receipt_signing_key ?? secrets?.treasury_private_key ?? null
    if (secret === null)
      deps.logger.warn(
        'MPP challenges are bound with a per-process key (no RECEIPT_SIGNING_KEY nor TREASURY_PRIVATE_KEY): another instance cannot verify them',
      )
    this.key = challengeKey(secret ?? toHex(crypto.getRandomValues(new Uint8Array(32))))
    const url = deps.config.server?.public_url
    this.realm = url ? new URL(url).host : 'tollgate'
    this.currency = getAddress(deps.chainInfo.usdcAddress)
    this.recipient = getAddress(deps.chainInfo.treasury)
    this.network = deps.chainInfo.x402Network
  }

  offer(q: OfferQuery): Offer {
    // A usage-priced endpoint is offered at its ceiling (what is not used goes back in the payout batch).
    return {
      mpp: mppOffer(this.key, {
        realm: this.realm,
        amountAtomic: q.amountAtomic,
        currency: this.currency,
        recipient: this.recipient,
        chainId: this.deps.chainInfo.chainId,
        decimals: USDC_DECIMALS,
        expiresInMs: q.maxTimeoutSeconds * 1000,
      }),
    }
  }

  reads(proof: Proof): boolean {
    return proof.kind === 'mpp'
  }

  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict> {
    if (proof.kind !== 'mpp') return { ok: false, reason: 'invalid_proof' }
    const throttle = this.deps.settlementThrottle
    if (throttle?.engaged) {
      return {
        ok: 'error',
        code: 'settlement_backlog',
        headers: ['retry-after', String(throttle.retryAfterS), ...CORS_HEADERS],
      }
    }
    const credential = parseCredential(proof.token)
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
    if (!(expiresMs > q.nowMs)) return { ok: false, reason: 'payment_expired' }
    const request = parseRequest(c.request)
    if (request === null) return { ok: false, reason: 'invalid_challenge' }
    // The terms are ours (a secret shared with another deployment on another chain would still be refused).
    if (
      request.methodDetails.chainId !== this.deps.chainInfo.chainId ||
      getAddress(request.currency) !== this.currency ||
      getAddress(request.recipient) !== this.recipient
    )
      return { ok: false, reason: 'invalid_challenge' }
    // The price may have changed since the challenge: it must still cover this request.
    const amount = BigInt(request.amount)
    if (amount < minimumAccepted(q.quote, q.nowMs) || (q.quote.varies && amount < q.quote.amountAtomic))
      return { ok: false, reason: 'payment_insufficient' }
    const a = parseAuthorization(credential.payload)
    if (a === null) return { ok: false, reason: 'invalid_payload' }
    if (a.value !== request.amount) return { ok: false, reason: 'payment_insufficient' }
    if (getAddress(a.to) !== this.recipient) return { ok: false, reason: 'invalid_payload' }
    // The nonce is the challenge's: an authorization signed for one challenge cannot answer another.
    if (a.nonce.toLowerCase() !== keccak256(toHex(`${c.id}${c.realm}`)))
      return { ok: false, reason: 'invalid_challenge' }
    // The rest is x402 exact's verification, word for word (signature, window, nonce on chain, balance).
    const exact = {
      x402Version: 1,
      scheme: 'exact',
      network: this.network,
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
    const verified = this.deps.verifier.verify(
      { kind: 'x402', raw: base64url(proof.token), payload: exact, version: 1 },
      q.client,
    )
    if (verified instanceof Promise) return verified.then((r) => this.decide(r, q))
    return this.decide(verified, q)
  }

  private decide(result: VerifyResult, q: PayQuery): Verdict {
    if (!result.ok) return refusal(result)
    if (result.kind !== 'eip3009') return { ok: false, reason: 'invalid_proof' }
    if (this.deps.usedProofs.has(result.proofKey)) return { ok: false, reason: 'proof_already_used' }
    const nonce = result.authorization.nonce
    return {
      ok: true,
      payment: new ClaimedPayment(this.claimed, {
        scheme: MPP_CHARGE,
        kind: 'eip3009',
        proofKey: result.proofKey,
        payer: result.payer,
        coversAtomic: result.valueAtomic,
        transaction: null,
        authorization: result.authorization,
        proofAtMs: null,
        endpointId: q.endpoint.id,
        accountId: q.endpoint.accountId,
        leaseMs: q.endpoint.timeoutMs + 5_000,
        reserve:
          result.balance === null
            ? null
            : { balanceAtomic: result.balance.atomic, block: result.balance.block },
        onInsufficientFunds: () => this.deps.verifier.forgetBalance(result.payer),
        receipt: (served) => (served ? paymentReceipt(nonce) : null),
      }),
    }
  }
}

/**
 * The MPP receipt (Payment-Receipt: base64url JSON, as mppx's Receipt reads it). The authorization settles
 * after the call, in a batch, so no transaction hash exists yet: the reference is the authorization's nonce
 * (the challenge hash), which the settlement transaction's AuthorizationUsed log names.
 */
function paymentReceipt(nonce: string): [string, string] {
  const json = `{"method":"${MPP_METHOD}","reference":"${nonce}","status":"success","timestamp":"${new Date().toISOString()}"}`
  return ['payment-receipt', base64url(json)]
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}
