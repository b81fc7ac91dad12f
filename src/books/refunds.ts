// The refund room: a merchant gives back all or part of a paid payment, call, or facilitator settlement to
// the treasury. A refund is booked at once
// (pending) as three ledger entries that sum to zero — the payer's refund, the merchant's debit and the fee
// given back — so the next payout batch sends it to the payer and nets the debit against the merchant's own
// payout; it turns paid when that payout confirms, or failed (reversed) when it fails.
//
//   record   from → to            function        precondition (in its SQL / under its locks)
//   refund   ∅ → pending          createRefund    source paid, amount ≤ refundable, merchant's unpaid ≥ debit
//                                                 (a facilitator settlement: to the treasury, and settled)
//   refund   pending → paid       confirmRefunds  its refund entry is in the payout being confirmed
//   refund   pending → failed     failRefunds     its refund entry is in the payout being failed
//
// Rules (docs/refunds.md): refundable = what the payment or call booked (owner share + fee; a call booked by
// its capture batch booked its own owner_share_atomic and fee_atomic) less what its refunds not failed
// already took. The merchant's part is its owner share in the same proportion (rounded
// so that a full refund takes back exactly the owner share booked); the rest is the service's fee, given
// back. The merchant's part comes only from its UNPAID balance: money already paid out (or in a payout on
// its way) is never clawed back, so a refund it cannot cover is refused.
import { insertEvent } from '../db/events.ts'
import { presentRefund, REFUND_COLUMNS, type RefundRow } from '../db/refunds.ts'
import type { Sql, Tx } from '../db/sql.ts'
import { toDollars } from '../money.ts'
import { PAYOUT_RECORD_LOCK } from './payout-lock.ts'

export type RefundTarget = { paymentId: string } | { callId: string } | { settlementId: string }

export type CreateRefundOutcome =
  | { kind: 'created'; refund: RefundRow }
  | { kind: 'not_found' }
  /** The payment is not paid (pending, expired, canceled), or the call's revenue is not booked yet. */
  | { kind: 'not_refundable'; detail: string }
  | { kind: 'exceeds_refundable'; refundableAtomic: bigint; capturedAtomic: bigint; refundedAtomic: bigint }
  | { kind: 'insufficient_balance'; unpaidAtomic: bigint; debitAtomic: bigint }

/**
 * What is refunded, named as its ledger entries name it: a payment, a call, or a facilitator settlement
 * (books/facilitator.ts, its owner share and fee booked as source 'facilitator').
 */
type SourceKind = 'payment' | 'call' | 'facilitator'

/** The refunds column naming each kind of source. */
const SOURCE_COLUMN = { payment: 'payment_id', call: 'call_id', facilitator: 'settlement_id' } as const

interface Source {
  kind: SourceKind
  id: string
  payer: string | null
  /** Why it cannot be refunded at all (null: it can). */
  blocked: string | null
}

/** Runs fn in the caller's transaction (an idempotent request's), or a new one. */
function inTransaction<T>(db: Sql | Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return 'savepoint' in db ? fn(db as Tx) : ((db as Sql).begin(fn) as Promise<T>)
}

/**
 * ∅ → pending. Under the payout recording lock (so no batch links the merchant's unpaid entries between the
 * balance read and this commit) and the source's row lock (so two refunds of one payment are serialised).
 * `amountAtomic` null: everything still refundable.
 */
export async function createRefund(
  db: Sql | Tx,
  q: {
    id: string
    accountId: string
    target: RefundTarget
    amountAtomic: bigint | null
    reason: string | null
  },
): Promise<CreateRefundOutcome> {
  return inTransaction(db, async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${PAYOUT_RECORD_LOCK})`
    const source = await lockSource(tx, q.accountId, q.target)
    if (!source) return { kind: 'not_found' } as const
    if (source.blocked) return { kind: 'not_refundable', detail: source.blocked } as const
    const { kind: sourceType, id: sourceId } = source
    // The source's id in its own column of the refund row, null in the others.
    const idIf = (kind: SourceKind) => (kind === sourceType ? sourceId : null)
    // A call booked by its capture batch (ledger_batch_id, migration 0050) booked exactly its own owner
    // share and fee (reconcile checks each batch entry against its calls); any other source by entries of
    // its own.
    const [booked] = await tx<{ captured: bigint; owner: bigint }[]>`
      SELECT coalesce(sum(e.amount), 0)::bigint AS captured,
             coalesce(sum(e.amount) FILTER (WHERE e.kind = 'owner_share'), 0)::bigint AS owner
      FROM (SELECT kind, amount_atomic AS amount FROM ledger_entries
            WHERE source_type = ${sourceType} AND source_id = ${sourceId} AND kind IN ('owner_share', 'fee')
            UNION ALL
            SELECT x.kind, x.amount FROM calls k
            CROSS JOIN LATERAL (VALUES ('owner_share', k.owner_share_atomic), ('fee', k.fee_atomic)) x(kind, amount)
            WHERE ${sourceType}::text = 'call' AND k.id = ${sourceId} AND k.ledger_batch_id IS NOT NULL) e`
    const captured = booked!.captured
    if (captured === 0n) {
      return {
        kind: 'not_refundable',
        detail: `${sourceId} has no revenue booked yet (its payment is not settled)`,
      } as const
    }
    const [before] = await tx<{ refunded: bigint; debited: bigint }[]>`
      SELECT coalesce(sum(amount_atomic), 0)::bigint AS refunded,
             coalesce(sum(owner_debit_atomic), 0)::bigint AS debited
      FROM refunds
      WHERE status <> 'failed' AND ${tx(SOURCE_COLUMN[sourceType])} = ${sourceId}`
    const refunded = before!.refunded
    const refundable = captured - refunded
    const amount = q.amountAtomic ?? refundable
    if (amount <= 0n || amount > refundable) {
      return {
        kind: 'exceeds_refundable',
        refundableAtomic: refundable,
        capturedAtomic: captured,
        refundedAtomic: refunded,
      } as const
    }
    // The merchant's part, cumulative: owner × refunded / captured rounded down, so the parts of several
    // partial refunds add up to exactly the owner share booked once the whole amount is refunded.
    const owedAfter = (booked!.owner * (refunded + amount)) / captured
    let debit = owedAfter - before!.debited
    if (debit < 0n) debit = 0n
    if (debit > amount) debit = amount
    const [balance] = await tx<{ unpaid: bigint; wallet: string }[]>`
      SELECT coalesce((SELECT owner_share_atomic - paid_out_atomic - in_flight_atomic
                       FROM account_balance_totals WHERE account_id = ${q.accountId}), 0)::bigint AS unpaid,
             (SELECT wallet_address FROM accounts WHERE id = ${q.accountId}) AS wallet`
    if (balance!.unpaid < debit)
      return { kind: 'insufficient_balance', unpaidAtomic: balance!.unpaid, debitAtomic: debit } as const
    const [refund] = await tx<RefundRow[]>`
      INSERT INTO refunds (id, account_id, payment_id, call_id, settlement_id, wallet, amount_atomic,
                           owner_debit_atomic, fee_returned_atomic, reason, status)
      VALUES (${q.id}, ${q.accountId}, ${idIf('payment')}, ${idIf('call')}, ${idIf('facilitator')},
              ${source.payer!}, ${amount},
              ${debit}, ${amount - debit}, ${q.reason}, 'pending')
      RETURNING ${tx.unsafe(REFUND_COLUMNS)}`
    // Zero parts are left out (a refund small enough to be all fee, or all owner share).
    await tx`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
      SELECT ${q.accountId}, e.kind, e.wallet, e.amount, 'refund', ${q.id}
      FROM (VALUES ('refund', ${source.payer!}::text, ${amount}::bigint),
                   ('owner_share', ${balance!.wallet}::text, ${-debit}::bigint),
                   ('fee', NULL::text, ${-(amount - debit)}::bigint)) AS e(kind, wallet, amount)
      WHERE e.amount <> 0`
    if (sourceType === 'payment') {
      await tx`
        INSERT INTO payment_timeline (payment_id, type, data)
        VALUES (${sourceId}, 'refund_created', ${tx.json({
          refund_id: q.id,
          amount: toDollars(amount),
          amount_atomic: amount.toString(),
          wallet: source.payer,
        })})`
    }
    await insertEvent(tx, { accountId: q.accountId, type: 'refund.created', data: presentRefund(refund!) })
    return { kind: 'created', refund: refund! } as const
  })
}

async function lockSource(tx: Tx, accountId: string, target: RefundTarget): Promise<Source | null> {
  if ('paymentId' in target) {
    const [p] = await tx<{ id: string; status: string; payer: string | null }[]>`
      SELECT id, status, payer FROM payments WHERE id = ${target.paymentId} AND account_id = ${accountId}
      FOR UPDATE`
    if (!p) return null
    const blocked =
      p.status !== 'paid' ? `payment ${p.id} is ${p.status}; only a paid payment can be refunded` : null
    return { kind: 'payment', id: p.id, payer: p.payer, blocked }
  }
  if ('settlementId' in target) {
    // FOR UPDATE serialises refunds of one settlement; once settled the row itself is never changed again.
    const [s] = await tx<{ id: string; payer: string; custody: string; settled: boolean }[]>`
      SELECT id, payer, custody, settled_at IS NOT NULL AS settled FROM facilitator_settlements
      WHERE id = ${target.settlementId} AND account_id = ${accountId} FOR UPDATE`
    if (!s) return null
    const blocked =
      s.custody !== 'treasury'
        ? `settlement ${s.id} paid your own wallet: tollgate never held that money, refund it from there`
        : !s.settled
          ? `settlement ${s.id} is not settled yet; only a settled payment can be refunded`
          : null
    return { kind: 'facilitator', id: s.id, payer: s.payer, blocked }
  }
  // FOR UPDATE serialises refunds of one call; the call row itself is never changed.
  const [c] = await tx<{ id: string; payer: string }[]>`
    SELECT id, call_payer(payer, payer_address) AS payer FROM calls
    WHERE id = ${target.callId} AND account_id = ${accountId} FOR UPDATE`
  if (!c) return null
  return { kind: 'call', id: c.id, payer: c.payer, blocked: null }
}

/** pending → paid: the refunds whose refund entry the confirmed payout carried, with their events. */
export async function confirmRefunds(tx: Tx, payout: { id: string; tx_hash: string }): Promise<RefundRow[]> {
  const rows = await tx<RefundRow[]>`
    UPDATE refunds r SET status = 'paid', paid_at = now(), payout_id = ${payout.id}, transaction = ${payout.tx_hash}
    FROM ledger_entries e
    WHERE e.payout_id = ${payout.id} AND e.source_type = 'refund' AND e.kind = 'refund' AND e.amount_atomic > 0
      AND r.id = e.source_id AND r.status = 'pending'
    RETURNING ${tx.unsafe(
      REFUND_COLUMNS.split(', ')
        .map((c) => `r.${c}`)
        .join(', '),
    )}`
  for (const r of rows)
    await insertEvent(tx, { accountId: r.account_id, type: 'refund.paid', data: presentRefund(r) })
  return rows
}

/**
 * pending → failed: the refunds whose refund entry the failed payout carried. Each is reversed by entries of
 * the opposite sign: the payer's part is reversed inside the failed payout (so it is never batched again),
 * the merchant's debit and the fee come back as unpaid entries. Call before the payout's entries are
 * unlinked (unlinkEntries leaves failed refunds' entries where they are).
 */
export async function failRefunds(
  tx: Tx,
  payout: { id: string; tx_hash: string; error: string },
): Promise<RefundRow[]> {
  const rows = await tx<RefundRow[]>`
    UPDATE refunds r SET status = 'failed', failed_at = now(), payout_id = ${payout.id},
           transaction = ${payout.tx_hash}, failure_reason = ${payout.error.slice(0, 500)}
    FROM ledger_entries e
    WHERE e.payout_id = ${payout.id} AND e.source_type = 'refund' AND e.kind = 'refund' AND e.amount_atomic > 0
      AND r.id = e.source_id AND r.status = 'pending'
    RETURNING ${tx.unsafe(
      REFUND_COLUMNS.split(', ')
        .map((c) => `r.${c}`)
        .join(', '),
    )}`
  if (rows.length === 0) return rows
  await tx`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id, payout_id)
    SELECT e.account_id, e.kind, e.wallet, -e.amount_atomic, 'refund', e.source_id,
           CASE WHEN e.kind = 'refund' THEN ${payout.id} END
    FROM ledger_entries e
    WHERE e.source_type = 'refund' AND e.source_id = ANY(${rows.map((r) => r.id)}::text[])`
  for (const r of rows)
    await insertEvent(tx, { accountId: r.account_id, type: 'refund.failed', data: presentRefund(r) })
  return rows
}
