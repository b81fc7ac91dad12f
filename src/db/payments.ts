// Payments: queries, the API object, and the state changes (proof applied, expired, canceled). Each state
// change is one transaction holding the payment row lock: claim + payment + ledger + timeline + event.
//
// Money rule: a proof that does not complete a payment is held (claim 'applied', no ledger entry yet).
// When the payment is paid, the whole amount received is booked as owner share + fee; when it expires or
// is canceled instead, every held proof is refunded to its sender. A customer's money is never stranded.
import { splitOwnerShare, toDollars } from '../money.ts'
import { afterCursor } from './cursor.ts'
import { insertEvent } from './events.ts'
import type { Sql, Tx } from './sql.ts'

export type PaymentStatus = 'pending' | 'paid' | 'expired' | 'canceled'

export interface PaymentRow {
  id: string
  account_id: string
  amount_atomic: bigint
  amount_received_atomic: bigint
  description: string
  metadata: Record<string, string>
  status: PaymentStatus
  success_url: string | null
  expires_at: Date
  paid_at: Date | null
  transaction: string | null
  payer: string | null
  canceled_at: Date | null
  created_at: Date
}

/** A payment with what the checkout page and the ledger need from its account. */
export interface CheckoutPaymentRow extends PaymentRow {
  business_name: string
  owner_wallet: string
}

export interface TimelineRow {
  type: string
  data: Record<string, unknown>
  created_at: Date
}

const COLUMNS =
  'id, account_id, amount_atomic, amount_received_atomic, description, metadata, status, success_url, expires_at, paid_at, transaction, payer, canceled_at, created_at'
const P_COLUMNS = COLUMNS.split(', ')
  .map((c) => `p.${c}`)
  .join(', ')

/** What the payment object needs besides the row: where it is paid and how to reach it. */
export interface PaymentView {
  publicUrl: string
  network: string
  chainId: number
  treasury: string
  usdcAddress: string
}

export function presentPayment(p: PaymentRow, view: PaymentView) {
  const excess = p.amount_received_atomic > p.amount_atomic ? p.amount_received_atomic - p.amount_atomic : 0n
  const due = p.status === 'pending' ? amountDue(p) : 0n
  return {
    id: p.id,
    object: 'payment',
    status: p.status,
    amount: toDollars(p.amount_atomic),
    amount_atomic: p.amount_atomic.toString(),
    amount_received: toDollars(p.amount_received_atomic),
    amount_received_atomic: p.amount_received_atomic.toString(),
    amount_due: toDollars(due),
    amount_due_atomic: due.toString(),
    /** Paid beyond the amount: captured with the payment (not refunded). */
    amount_excess_atomic: excess.toString(),
    currency: 'USDC',
    description: p.description,
    metadata: p.metadata,
    recipient: view.treasury,
    network: view.network,
    chain_id: view.chainId,
    asset: view.usdcAddress,
    payment_url: `${view.publicUrl}/pay/${p.id}`,
    success_url: p.success_url,
    created_at: p.created_at.toISOString(),
    expires_at: p.expires_at.toISOString(),
    paid_at: p.paid_at?.toISOString() ?? null,
    canceled_at: p.canceled_at?.toISOString() ?? null,
    transaction: p.transaction,
    payer: p.payer,
  }
}

export function presentTimeline(rows: TimelineRow[]) {
  return rows.map((t) => ({ type: t.type, created_at: t.created_at.toISOString(), ...t.data }))
}

export function amountDue(p: Pick<PaymentRow, 'amount_atomic' | 'amount_received_atomic'>): bigint {
  const due = p.amount_atomic - p.amount_received_atomic
  return due > 0n ? due : 0n
}

/** pending but past expires_at counts as expired even before the sweeper writes it. */
export function effectiveStatus(
  p: Pick<PaymentRow, 'status' | 'expires_at'>,
  nowMs = Date.now(),
): PaymentStatus {
  return p.status === 'pending' && p.expires_at.getTime() <= nowMs ? 'expired' : p.status
}

// ── reads ────────────────────────────────────────────────────────────────────────────────────────────

export async function insertPayment(
  db: Sql | Tx,
  p: {
    id: string
    accountId: string
    amountAtomic: bigint
    description: string
    metadata: Record<string, string>
    successUrl: string | null
    expiresInMs: number
  },
): Promise<PaymentRow> {
  // One statement, so the row and its first timeline entry exist together even outside a transaction.
  const [row] = await db<PaymentRow[]>`
    WITH p AS (
      INSERT INTO payments (id, account_id, amount_atomic, description, metadata, status, success_url, expires_at)
      VALUES (${p.id}, ${p.accountId}, ${p.amountAtomic}, ${p.description}, ${db.json(p.metadata)}, 'pending',
              ${p.successUrl}, now() + ${p.expiresInMs} * interval '1 millisecond')
      RETURNING ${db.unsafe(COLUMNS)}
    ), t AS (
      INSERT INTO payment_timeline (payment_id, type, data)
      SELECT id, 'created', jsonb_build_object('amount_atomic', amount_atomic::text) FROM p
    )
    SELECT ${db.unsafe(COLUMNS)} FROM p`
  return row!
}

export async function findOwnedPayment(
  db: Sql | Tx,
  accountId: string,
  id: string,
): Promise<PaymentRow | null> {
  const [row] = await db<PaymentRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM payments WHERE id = ${id} AND account_id = ${accountId}`
  return row ?? null
}

/** The checkout's read: any payment by id, with the merchant's display name and wallet. */
export async function findCheckoutPayment(db: Sql | Tx, id: string): Promise<CheckoutPaymentRow | null> {
  const [row] = await db<CheckoutPaymentRow[]>`
    SELECT ${db.unsafe(P_COLUMNS)}, a.business_name, a.wallet_address AS owner_wallet
    FROM payments p JOIN accounts a ON a.id = p.account_id WHERE p.id = ${id}`
  return row ?? null
}

export async function listPayments(
  db: Sql | Tx,
  q: { accountId: string; status: PaymentStatus | null; limit: number; startingAfter: string | null },
): Promise<PaymentRow[]> {
  return db<PaymentRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM payments
    WHERE account_id = ${q.accountId}
    ${q.status ? db`AND status = ${q.status}` : db``}
    ${afterCursor(db, 'payments', q.startingAfter, q.accountId)}
    ORDER BY created_at DESC, id DESC
    LIMIT ${q.limit}`
}

export async function paymentTimeline(db: Sql | Tx, paymentId: string): Promise<TimelineRow[]> {
  return db<TimelineRow[]>`
    SELECT type, data, created_at FROM payment_timeline WHERE payment_id = ${paymentId} ORDER BY id`
}

async function addTimeline(db: Sql | Tx, paymentId: string, type: string, data: Record<string, unknown>) {
  await db`INSERT INTO payment_timeline (payment_id, type, data) VALUES (${paymentId}, ${type}, ${db.json(data as never)})`
}

async function lockPayment(tx: Tx, id: string): Promise<CheckoutPaymentRow | null> {
  const [row] = await tx<CheckoutPaymentRow[]>`
    SELECT ${tx.unsafe(P_COLUMNS)}, a.business_name, a.wallet_address AS owner_wallet
    FROM payments p JOIN accounts a ON a.id = p.account_id WHERE p.id = ${id} FOR UPDATE OF p`
  return row ?? null
}

// ── state changes ────────────────────────────────────────────────────────────────────────────────────

export interface PaymentProof {
  proofKey: string
  kind: 'tx' | 'eip3009'
  payer: string
  valueAtomic: bigint
  transaction: string
}

export type ApplyOutcome =
  | { kind: 'not_found' }
  | { kind: 'proof_already_used' }
  /** Counted toward the payment; `paid` says whether it completed it. */
  | { kind: 'applied'; paid: boolean; payment: PaymentRow }
  /** Claimed and owed back to its sender: the payment could not take it (paid, expired, canceled). */
  | { kind: 'refund_scheduled'; reason: 'already_paid' | 'expired' | 'canceled'; payment: PaymentRow }

/**
 * Claims a verified proof for a payment and applies it, in one transaction under the payment's row lock:
 * concurrent proofs for one payment are serialised (it is paid once), and the claims primary key makes a
 * proof count once across calls and payments, on any instance.
 */
export async function applyPaymentProof(
  sql: Sql,
  q: { paymentId: string; proof: PaymentProof; ownerShareBps: number; view: PaymentView },
): Promise<ApplyOutcome> {
  const { proof } = q
  return (await sql.begin(async (tx) => {
    let payment = await lockPayment(tx, q.paymentId)
    if (!payment) return { kind: 'not_found' }
    // A pending payment past its expiry is expired now, in this transaction, before anything is applied.
    if (payment.status === 'pending' && payment.expires_at.getTime() <= Date.now()) {
      payment = { ...payment, ...(await expireLocked(tx, payment, q.view)) }
    }
    const payable = payment.status === 'pending'
    const claimed = await tx`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status, captured_at)
      VALUES (${proof.proofKey}, ${proof.kind}, 'payment', ${payment.id}, ${payment.account_id}, ${proof.payer},
              ${proof.valueAtomic}, ${payable ? 'applied' : 'refund_due'}, ${payable ? tx`now()` : null})
      ON CONFLICT (proof_key) DO NOTHING RETURNING proof_key`
    if (claimed.length === 0) return { kind: 'proof_already_used' }
    const proofData = {
      transaction: proof.transaction,
      payer: proof.payer,
      amount: toDollars(proof.valueAtomic),
      amount_atomic: proof.valueAtomic.toString(),
    }

    if (!payable) {
      const reason =
        payment.status === 'paid' ? 'already_paid' : payment.status === 'canceled' ? 'canceled' : 'expired'
      await scheduleRefund(tx, payment, { ...proof, reason }, q.view)
      return { kind: 'refund_scheduled', reason, payment }
    }

    const received = payment.amount_received_atomic + proof.valueAtomic
    const paid = received >= payment.amount_atomic
    const [updated] = await tx<PaymentRow[]>`
      UPDATE payments SET amount_received_atomic = ${received},
        status = ${paid ? 'paid' : 'pending'},
        paid_at = ${paid ? tx`now()` : null},
        transaction = ${paid ? proof.transaction : payment.transaction},
        payer = ${paid ? proof.payer : payment.payer}
      WHERE id = ${payment.id}
      RETURNING ${tx.unsafe(COLUMNS)}`
    const after = updated!
    const due = amountDue(after)
    await addTimeline(tx, payment.id, 'proof_applied', {
      ...proofData,
      amount_received_atomic: received.toString(),
      amount_due_atomic: due.toString(),
    })
    if (paid) {
      // The whole amount received is captured, excess included: the customer sent it to this payment.
      const excess = received - payment.amount_atomic
      const { owner, fee } = splitOwnerShare(received, q.ownerShareBps)
      await tx`
        INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id) VALUES
          (${payment.account_id}, 'owner_share', ${payment.owner_wallet}, ${owner}, 'payment', ${payment.id}),
          (${payment.account_id}, 'fee', NULL, ${fee}, 'payment', ${payment.id})`
      await addTimeline(tx, payment.id, 'paid', {
        transaction: proof.transaction,
        amount_received_atomic: received.toString(),
        amount_excess_atomic: excess.toString(),
        owner_share_atomic: owner.toString(),
        fee_atomic: fee.toString(),
      })
      await insertEvent(tx, {
        accountId: payment.account_id,
        type: 'payment.received',
        data: { ...presentPayment(after, q.view), proof: proofData },
      })
    } else {
      await insertEvent(tx, {
        accountId: payment.account_id,
        type: 'payment.underpaid',
        data: { ...presentPayment(after, q.view), proof: proofData },
      })
    }
    return { kind: 'applied', paid, payment: after }
  })) as ApplyOutcome
}

/** A claimed proof the payment cannot take: owed back to its sender (ledger), said on the timeline and as an event. */
async function scheduleRefund(
  tx: Tx,
  payment: PaymentRow,
  r: { proofKey: string; payer: string; valueAtomic: bigint; transaction: string; reason: string },
  view: PaymentView,
): Promise<void> {
  await tx`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    VALUES (${payment.account_id}, 'refund', ${r.payer}, ${r.valueAtomic}, 'claim', ${r.proofKey})`
  const refund = {
    transaction: r.transaction,
    payer: r.payer,
    amount: toDollars(r.valueAtomic),
    amount_atomic: r.valueAtomic.toString(),
    reason: r.reason,
  }
  await addTimeline(tx, payment.id, 'refund_scheduled', refund)
  await insertEvent(tx, {
    accountId: payment.account_id,
    type: 'payment.refund_scheduled',
    data: { ...presentPayment(payment, view), refund },
  })
}

/** Held (applied) proofs of a payment that will never complete go back to their senders. */
async function refundHeldProofs(
  tx: Tx,
  payment: PaymentRow,
  reason: string,
  view: PaymentView,
): Promise<void> {
  const held = await tx<{ proof_key: string; payer: string; amount_atomic: bigint }[]>`
    UPDATE claims SET status = 'refund_due'
    WHERE target_type = 'payment' AND target_id = ${payment.id} AND status = 'applied'
    RETURNING proof_key, payer, amount_atomic`
  for (const c of held) {
    await scheduleRefund(
      tx,
      payment,
      {
        proofKey: c.proof_key,
        payer: c.payer,
        valueAtomic: c.amount_atomic,
        transaction: c.proof_key.startsWith('tx:') ? c.proof_key.slice(3) : c.proof_key,
        reason,
      },
      view,
    )
  }
}

async function expireLocked(tx: Tx, payment: PaymentRow, view: PaymentView): Promise<PaymentRow> {
  const [row] = await tx<PaymentRow[]>`
    UPDATE payments SET status = 'expired' WHERE id = ${payment.id} AND status = 'pending'
    RETURNING ${tx.unsafe(COLUMNS)}`
  const expired = row!
  await addTimeline(tx, payment.id, 'expired', {
    amount_received_atomic: expired.amount_received_atomic.toString(),
  })
  await insertEvent(tx, {
    accountId: payment.account_id,
    type: 'payment.expired',
    data: presentPayment(expired, view),
  })
  await refundHeldProofs(tx, expired, 'expired', view)
  return expired
}

/**
 * Expires pending payments past expires_at, a batch at a time, each in its own transaction.
 * SKIP LOCKED: a payment being paid right now is left to that transaction (it expires it itself if due).
 */
export async function expireDuePayments(sql: Sql, q: { view: PaymentView; batch?: number }): Promise<number> {
  let total = 0
  for (;;) {
    const n = (await sql.begin(async (tx) => {
      const due = await tx<PaymentRow[]>`
        SELECT ${tx.unsafe(COLUMNS)} FROM payments
        WHERE status = 'pending' AND expires_at <= now()
        ORDER BY expires_at LIMIT ${q.batch ?? 100}
        FOR UPDATE SKIP LOCKED`
      for (const p of due) await expireLocked(tx, p, q.view)
      return due.length
    })) as number
    total += n
    if (n < (q.batch ?? 100)) return total
  }
}

export type CancelOutcome =
  | { kind: 'not_found' }
  | { kind: 'invalid_state'; payment: PaymentRow }
  | { kind: 'canceled'; payment: PaymentRow }

/** pending → canceled; any partial amount already received is refunded to its senders. */
export async function cancelPayment(
  sql: Sql,
  q: { accountId: string; id: string; view: PaymentView },
): Promise<CancelOutcome> {
  return (await sql.begin(async (tx) => {
    const payment = await lockPayment(tx, q.id)
    if (!payment || payment.account_id !== q.accountId) return { kind: 'not_found' }
    if (payment.status === 'pending' && payment.expires_at.getTime() <= Date.now()) {
      return { kind: 'invalid_state', payment: await expireLocked(tx, payment, q.view) }
    }
    if (payment.status !== 'pending') return { kind: 'invalid_state', payment }
    const [row] = await tx<PaymentRow[]>`
      UPDATE payments SET status = 'canceled', canceled_at = now() WHERE id = ${payment.id}
      RETURNING ${tx.unsafe(COLUMNS)}`
    await addTimeline(tx, payment.id, 'canceled', {})
    await refundHeldProofs(tx, row!, 'canceled', q.view)
    return { kind: 'canceled', payment: row! }
  })) as CancelOutcome
}
