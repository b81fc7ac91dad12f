// A WebSocket session's credit: the payments that fund it and the top-ups sent on its socket. A channel's
// voucher session stays one payment whose vouchers extend it (SessionFunds); any other session owns one
// payment per proof (its opening one, then each top-up), each claimed once and captured apart when the
// session ends, the session's charge filled into them in the order they were paid.

import { newId } from '../ids.ts'
import type { UsageRecord } from '../pricing/model.ts'
import { splitCharge } from '../pricing/session.ts'
import type { SchemeRegistry } from '../schemes/registry.ts'
import type { Payment, PayQuery, ServedCall, SessionFunds } from '../schemes/scheme.ts'
import { parseProof } from '../wire/proof.ts'

/** The method of a top-up sent on the socket (an x402 WebSocket transport request: `payment` is the proof). */
export const TOP_UP_METHOD = 'tollgate.top_up'
// Only text messages this small that name the method are read as JSON (cheap substring test first).
const TOP_UP_MAX_BYTES = 65_536
const TOP_UP_NEEDLE = Buffer.from(`"${TOP_UP_METHOD}"`)

export interface TopUpRequest {
  id: unknown
  /** The proof as a payment header would carry it (an x402 payload object is base64-encoded). */
  proof: string
}

/** A client message that is a top-up (never relayed upstream), or null. */
export function readTopUp(message: Uint8Array, isBinary: boolean): TopUpRequest | null {
  if (isBinary || message.byteLength > TOP_UP_MAX_BYTES) return null
  const bytes = Buffer.from(message.buffer, message.byteOffset, message.byteLength)
  if (!bytes.includes(TOP_UP_NEEDLE)) return null
  let o: { method?: unknown; id?: unknown; payment?: unknown } | null
  try {
    o = JSON.parse(bytes.toString('utf8'))
  } catch {
    return null
  }
  if (o === null || typeof o !== 'object' || o.method !== TOP_UP_METHOD) return null
  const p = o.payment
  const proof =
    typeof p === 'string'
      ? p
      : p !== null && typeof p === 'object'
        ? Buffer.from(JSON.stringify(p)).toString('base64')
        : ''
  return { id: o.id ?? null, proof }
}

export type TopUpResult =
  | { ok: true; addedAtomic: bigint; receipt: [string, string] | null }
  | { ok: false; reason: string; requiredHeader?: string; status?: 'unavailable' }

export class SessionCredit {
  readonly payments: Payment[]
  /** The opening payment pays as it goes (a channel): top-ups extend it. */
  readonly funds: SessionFunds | null
  /** Top-up receipts, by the payment they made (for the session's rows). */
  readonly receiptIds: string[]

  constructor(
    first: Payment,
    firstReceiptId: string,
    private readonly schemes: SchemeRegistry,
  ) {
    this.payments = [first]
    this.receiptIds = [firstReceiptId]
    this.funds = first.sessionFunds?.() ?? null
  }

  /** What the session's payments cover (base units): its charge never goes past it. */
  get coversAtomic(): bigint {
    let sum = 0n
    for (const p of this.payments) sum += p.coversAtomic
    return sum
  }

  /** The 101's receipt header. */
  receipt(): [string, string] | null {
    return this.funds !== null ? this.funds.receipt() : this.payments[0]!.receipt(true)
  }

  /** Verifies and holds a top-up: a channel's next voucher, or a payment of its own claimed once. */
  async topUp(proofText: string, q: PayQuery): Promise<TopUpResult> {
    const proof = parseProof(proofText)
    if (proof.kind === 'invalid') return { ok: false, reason: 'invalid_proof' }
    if (this.funds !== null) return this.funds.topUp(proof, q)
    const verdict = await this.schemes.verify(proof, q)
    if (verdict.ok === false)
      return {
        ok: false,
        reason: verdict.reason,
        ...(verdict.requiredHeader ? { requiredHeader: verdict.requiredHeader } : {}),
      }
    if (verdict.ok === 'unavailable') return { ok: false, reason: verdict.reason, status: 'unavailable' }
    if (verdict.ok === 'error') return { ok: false, reason: verdict.code }
    if (verdict.ok === 'answered') return { ok: false, reason: 'invalid_state' }
    const payment = verdict.payment
    // A channel voucher tops up only the session it opened: here it would be a call of its own, held open.
    if (payment.sessionFunds?.() != null) {
      payment.drop()
      return { ok: false, reason: 'top_up_scheme_not_taken' }
    }
    let outcome: string
    try {
      outcome = await payment.claim()
    } catch {
      return { ok: false, reason: 'claim_failed', status: 'unavailable' }
    }
    if (outcome === 'used') return { ok: false, reason: 'proof_already_used' }
    if (outcome === 'busy') return { ok: false, reason: 'payment_in_progress' }
    if (outcome === 'insufficient_funds') return { ok: false, reason: 'insufficient_funds' }
    this.payments.push(payment)
    this.receiptIds.push(newId('rcpt'))
    return { ok: true, addedAtomic: payment.coversAtomic, receipt: payment.receipt(true) }
  }

  /**
   * Once, when the session ends: each payment captured for its share of the charge (the rest of it
   * refunded as any usage-priced call's). The usage quantities and the delivery go on the opening payment's
   * row.
   */
  capture(
    call: Omit<ServedCall, 'callId' | 'receiptId' | 'chargeAtomic' | 'usage'>,
    usage: UsageRecord,
    delivery: { sha256: string; bytes: number },
    endedBy: string,
  ): void {
    const shares = splitCharge(
      usage.chargeAtomic,
      this.payments.map((p) => p.coversAtomic),
    )
    const callIds = this.receiptIds.map((r) => `call_${r.slice(5)}`)
    // The opening row is the session's one row: its whole charge, who ended it and its top-ups' rows; a
    // top-up's row says only its share and which session it paid for.
    const session = {
      ended_by: endedBy,
      charge_atomic: usage.chargeAtomic.toString(),
      payments: this.payments.length,
      top_up_call_ids: callIds.slice(1),
    }
    this.payments.forEach((payment, i) => {
      const receiptId = this.receiptIds[i]!
      const share = shares[i]!
      payment.capture({
        ...call,
        callId: callIds[i]!,
        receiptId,
        chargeAtomic: share,
        // Each row's ceiling is what its payment covers (a voucher session's: every voucher it was sent).
        usage:
          i === 0
            ? { ...usage, chargeAtomic: share, ceilingAtomic: payment.coversAtomic, session }
            : {
                ...usage,
                quantities: { top_up: i },
                chargeAtomic: share,
                ceilingAtomic: payment.coversAtomic,
                capped: false,
                session: { call_id: callIds[0]! },
              },
      })
    })
    // The signed final receipt attests what the session delivered (SHA-256 over its messages in order), on
    // the opening payment's row; a scheme that writes its own calls (a channel) shows none.
    this.payments[0]!.deliver?.(delivery.sha256, delivery.bytes)
  }
}
