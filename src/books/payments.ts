// The payment transitions: every statement that changes a payment, its timeline, the figure reserved for it,
// the claims and ledger entries booked on its behalf, and the unmatched inflows. Each transition runs under
// the payment's row lock, states its precondition in its SQL and says whether it applied.
//
// Their states and moves are rows of the transition table (transitions.ts: payment, checkout_figure,
// unmatched_inflow, and the claims and ledger entries booked for a payment).
//
// Money rule: a proof that does not complete a payment is held (claim 'applied', no ledger entry yet). When
// the payment is paid, what it received up to its requested figure is booked as owner share + fee, and
// anything beyond is owed back to the payer who overshot. When it expires or is canceled instead, every
// held proof is refunded to its sender. A customer's money is never stranded.

import { randomInt } from 'node:crypto'
import { insertEvent } from '../db/events.ts'
import { type PaymentView, presentPayment } from '../db/payment-presenter.ts'
import {
  amountDue,
  amountSurplus,
  CHECKOUT_COLUMNS,
  type CheckoutPaymentRow,
  CREATED_LINE_DATA,
  PAYMENT_COLUMNS,
  type PaymentRow,
} from '../db/payments.ts'
import type { Sql, Tx } from '../db/sql.ts'
import { splitOwnerShare, toDollars } from '../money.ts'
import { claimScheme, protocolOf } from './protocols.ts'

/**
 * The largest offset added to a price to make its figure unique: 9,999 base units, under one cent, so a
 * customer never pays a noticeable extra, and 9,999 payments of one price can be open (or held) at once.
 */
export const MAX_FIGURE_OFFSET_ATOMIC = 9_999n
/**
 * How long a closed payment keeps its figure: a transfer of it sent late (after expiry) or twice still
 * reaches this payment and is refunded, instead of paying another customer's order with the same figure.
 */
export const FIGURE_HOLD_MS = 24 * 60 * 60 * 1000

export interface PaymentProof {
  proofKey: string
  kind: 'tx' | 'eip3009'
  payer: string
  valueAtomic: bigint
  transaction: string
  /** A transaction's block time (ms), stored with its claim for the retention horizon. */
  proofAtMs?: number | null
  /** The scheme that paid (its protocol is said in the payment's events); default by kind. */
  scheme?: string
}

export type ApplyOutcome =
  | { kind: 'not_found' }
  | { kind: 'proof_already_used' }
  /** Counted toward the payment; `paid` says whether it completed it. */
  | { kind: 'applied'; paid: boolean; payment: PaymentRow }
  /** Claimed and owed back to its sender: the payment could not take it (paid, expired, canceled). */
  | { kind: 'refund_scheduled'; reason: 'already_paid' | 'expired' | 'canceled'; payment: PaymentRow }

export type CreateOutcome = { kind: 'created'; payment: PaymentRow } | { kind: 'figures_exhausted' }

// ── figures ──────────────────────────────────────────────────────────────────────────────────────────

/**
 * The figures the first look for a free figure covers, from the lowest: while one of these is free it is
 * taken, so a price with fewer open payments than this gets the smallest free offset. Beyond, a window at
 * random: the search for the lowest free figure walked every taken figure of the price (one to two thousand
 * in the bench's payment-create run, all one price), and with the five-statement transaction it replaced
 * cost PostgreSQL ~1.8-2.3 ms of CPU per creation; a window costs it ~90 µs.
 */
const LOW_WINDOW = 32
/** The figures a look at a random place covers. */
const RANDOM_WINDOW = 16
/** Looks at random places before the whole range is searched (which only a nearly full price needs). */
const RANDOM_LOOKS = 6
/** Looks a creation makes, the last one over the whole range: none free after it, the price is full. */
export const FIGURE_LOOKS = RANDOM_LOOKS + 2

/** Two windows [aFrom, aTo] and [bFrom, bTo] of figures to look in; b is null in the last look. */
type FigureWindows = [bigint, bigint, bigint | null, bigint | null]

/**
 * Where to look for a free figure in [low, high], as SQL yielding one `figure`, null when the look found none
 * free. Look 0: the lowest window, and a random one in case it is full (a free figure of the lowest window is
 * below any of the random one's). Later looks (the one found was taken meanwhile by another creation, or both
 * windows were full): random windows only, so concurrent creations of one price do not all go for the same
 * next figure (32 at once did, one won each round, and the last ran out of looks: a 503 "too many open
 * payments" with most figures free). The last look searches the whole range: none there means none is free.
 * checkout_free_figure (migration 0056) walks the windows by the primary key, whatever the table held when
 * the session first planned it.
 */
function freeFigure(db: Sql | Tx, low: bigint, high: bigint, look: number) {
  const [aFrom, aTo, bFrom, bTo] = figureWindows(low, high, look)
  return db`SELECT checkout_free_figure(${aFrom}, ${aTo}, ${bFrom}, ${bTo}) AS figure`
}

/** Where look number `look` at [low, high] looks (freeFigure says why there). */
function figureWindows(low: bigint, high: bigint, look: number): FigureWindows {
  if (look > RANDOM_LOOKS) return [low, high, null, null]
  // [from, to] of a window of `width` figures, cut at `high`.
  const window = (from: bigint, width: number): [bigint, bigint] => {
    const last = from + BigInt(width) - 1n
    return [from, last < high ? last : high]
  }
  const random = () => {
    const starts = high - low - BigInt(RANDOM_WINDOW) + 2n
    return window(low + (starts > 1n ? BigInt(randomInt(Number(starts))) : 0n), RANDOM_WINDOW)
  }
  const [aFrom, aTo] = look === 0 ? window(low, LOW_WINDOW) : random()
  const [bFrom, bTo] = random()
  return [aFrom, aTo, bFrom, bTo]
}

/**
 * Reserves a free figure in [base + firstOffset, base + MAX_FIGURE_OFFSET_ATOMIC] for a payment (see
 * freeFigure for which). The primary key makes it atomic: of two transactions taking one figure, the second's
 * insert waits for the first, finds it taken (not held past its hold) and looks again. Null when all are taken.
 */
export async function reserveFigure(
  tx: Tx,
  q: { paymentId: string; baseAtomic: bigint; firstOffsetAtomic: bigint },
): Promise<bigint | null> {
  const low = q.baseAtomic + q.firstOffsetAtomic
  const high = q.baseAtomic + MAX_FIGURE_OFFSET_ATOMIC
  for (let look = 0; look < FIGURE_LOOKS; look++) {
    const [row] = await tx<{ amount_atomic: bigint }[]>`
      INSERT INTO checkout_amounts (amount_atomic, payment_id)
      SELECT f.figure, ${q.paymentId} FROM (${freeFigure(tx, low, high, look)}) f WHERE f.figure IS NOT NULL
      ON CONFLICT (amount_atomic) DO UPDATE SET payment_id = EXCLUDED.payment_id, reserved_at = now(), held_until = NULL
        WHERE checkout_amounts.held_until IS NOT NULL AND checkout_amounts.held_until <= now()
      RETURNING amount_atomic`
    if (row) return row.amount_atomic
  }
  return null
}

/** open → held: the payment's open figures stay bound to it for FIGURE_HOLD_MS, then become free. */
async function holdFigures(tx: Tx, paymentId: string): Promise<void> {
  await tx`
    UPDATE checkout_amounts SET held_until = now() + ${FIGURE_HOLD_MS} * interval '1 millisecond'
    WHERE payment_id = ${paymentId} AND held_until IS NULL`
}

// ── creation ─────────────────────────────────────────────────────────────────────────────────────────

/**
 * ∅ → pending, with its unique figure reserved (checkout_figure ∅ → open), in one statement: the payment
 * exists with its figure or not at all. A look that finds no free figure, or loses it to a concurrent
 * creation, inserts nothing and the next look is made. It was a transaction of five statements (seven round
 * trips), each paying the driver's and the server's cost per statement. The timeline's first line, `created`,
 * is not stored: it is the payment row itself (paymentTimeline reads it from there), until a top-up is about
 * to change the figure it shows (reserveTopUp stores it then). Storing it at every creation was a third
 * insert, two index entries and a sequence value per payment: ~13 % of PostgreSQL's CPU per creation.
 */
export async function createPayment(
  db: Sql | Tx,
  p: {
    id: string
    accountId: string
    amountAtomic: bigint
    description: string
    metadata: Record<string, string>
    successUrl: string | null
    cancelUrl: string | null
    logoUrl: string | null
    expiresInMs: number
  },
): Promise<CreateOutcome> {
  // Offsets start at 1: the round price itself is never a figure, so a transfer of a round amount (a
  // metered call's price, a customer who rounded) is never taken for a payment's.
  const low = p.amountAtomic + 1n
  const high = p.amountAtomic + MAX_FIGURE_OFFSET_ATOMIC
  for (let look = 0; look < FIGURE_LOOKS; look++) {
    // The figure's row refers to the payment inserted beside it, in this one statement (no foreign key:
    // migration 0052 says why).
    const [row] = await db<PaymentRow[]>`
      WITH figure AS (
        INSERT INTO checkout_amounts (amount_atomic, payment_id)
        SELECT f.figure, ${p.id} FROM (${freeFigure(db, low, high, look)}) f WHERE f.figure IS NOT NULL
        ON CONFLICT (amount_atomic) DO UPDATE SET payment_id = EXCLUDED.payment_id, reserved_at = now(), held_until = NULL
          WHERE checkout_amounts.held_until IS NOT NULL AND checkout_amounts.held_until <= now()
        RETURNING amount_atomic
      ), payment AS (
        INSERT INTO payments (id, account_id, amount_atomic, amount_requested_atomic, description, metadata, status,
                              success_url, cancel_url, logo_url, expires_at)
        SELECT ${p.id}, ${p.accountId}, ${p.amountAtomic}, figure.amount_atomic, ${p.description},
               ${db.json(p.metadata)}, 'pending', ${p.successUrl}, ${p.cancelUrl}, ${p.logoUrl},
               now() + ${p.expiresInMs} * interval '1 millisecond'
        FROM figure
        RETURNING ${db.unsafe(PAYMENT_COLUMNS)}
      )
      SELECT * FROM payment`
    if (row) return { kind: 'created', payment: row }
  }
  return { kind: 'figures_exhausted' }
}

/** A payment to create, as createPayment takes it. */
export type NewPayment = Parameters<typeof createPayment>[1]

/**
 * ∅ → pending for several payments in one statement and one commit, each with its figure (checkout_figure
 * ∅ → open), as createPayment does for one; `look` is each one's look number (figureWindows). Returns the
 * payments created; one not among them found no free figure in its look, or lost it to another creation of
 * this statement or a concurrent one, and makes its next look. Two of one statement never take one figure:
 * each figure goes to the first of them that found it (an upsert may not touch a row twice in a statement).
 */
export async function createPaymentsTogether(
  db: Sql,
  batch: ReadonlyArray<{ payment: NewPayment; look: number }>,
): Promise<PaymentRow[]> {
  const rows = batch.map(({ payment: p, look }, i) => {
    const [aFrom, aTo, bFrom, bTo] = figureWindows(
      p.amountAtomic + 1n,
      p.amountAtomic + MAX_FIGURE_OFFSET_ATOMIC,
      look,
    )
    return {
      i,
      id: p.id,
      account_id: p.accountId,
      amount: String(p.amountAtomic),
      description: p.description,
      metadata: p.metadata,
      success_url: p.successUrl,
      cancel_url: p.cancelUrl,
      logo_url: p.logoUrl,
      expires_in_ms: p.expiresInMs,
      a_from: String(aFrom),
      a_to: String(aTo),
      b_from: bFrom === null ? null : String(bFrom),
      b_to: bTo === null ? null : String(bTo),
    }
  })
  return db<PaymentRow[]>`
    WITH req AS MATERIALIZED (
      SELECT t.*, checkout_free_figure(t.a_from, t.a_to, t.b_from, t.b_to) AS figure
      FROM json_to_recordset(${JSON.stringify(rows)}::text::json)
        AS t(i int, id text, account_id text, amount bigint, description text, metadata jsonb, success_url text,
             cancel_url text, logo_url text, expires_in_ms bigint, a_from bigint, a_to bigint, b_from bigint,
             b_to bigint)
    ),
    chosen AS MATERIALIZED (
      SELECT DISTINCT ON (figure) * FROM req WHERE figure IS NOT NULL ORDER BY figure, i
    ),
    figure AS (
      INSERT INTO checkout_amounts (amount_atomic, payment_id)
      SELECT figure, id FROM chosen
      ON CONFLICT (amount_atomic) DO UPDATE SET payment_id = EXCLUDED.payment_id, reserved_at = now(), held_until = NULL
        WHERE checkout_amounts.held_until IS NOT NULL AND checkout_amounts.held_until <= now()
      RETURNING amount_atomic, payment_id
    )
    INSERT INTO payments (id, account_id, amount_atomic, amount_requested_atomic, description, metadata, status,
                          success_url, cancel_url, logo_url, expires_at)
    SELECT c.id, c.account_id, c.amount, f.amount_atomic, c.description, coalesce(c.metadata, '{}'), 'pending',
           c.success_url, c.cancel_url, c.logo_url, now() + c.expires_in_ms * interval '1 millisecond'
    FROM figure f JOIN chosen c ON c.id = f.payment_id
    RETURNING ${db.unsafe(PAYMENT_COLUMNS)}`
}

// ── proofs ───────────────────────────────────────────────────────────────────────────────────────────

/**
 * Stores the timeline's `created` line, read until now from the payment row (createPayment), before a change
 * of the row would change what that line shows: the figure first asked for. Once per payment at most.
 */
async function keepCreatedLine(tx: Tx, paymentId: string): Promise<void> {
  await tx`
    INSERT INTO payment_timeline (payment_id, type, data, created_at)
    SELECT p.id, 'created', ${tx.unsafe(CREATED_LINE_DATA)}, p.created_at FROM payments p
    WHERE p.id = ${paymentId}
      AND NOT EXISTS (SELECT 1 FROM payment_timeline t WHERE t.payment_id = p.id AND t.type = 'created')`
}

async function addTimeline(db: Sql | Tx, paymentId: string, type: string, data: Record<string, unknown>) {
  await db`INSERT INTO payment_timeline (payment_id, type, data) VALUES (${paymentId}, ${type}, ${db.json(data as never)})`
}

async function lockPayment(tx: Tx, id: string): Promise<CheckoutPaymentRow | null> {
  const [row] = await tx<CheckoutPaymentRow[]>`
    SELECT ${tx.unsafe(CHECKOUT_COLUMNS)}
    FROM payments p JOIN accounts a ON a.id = p.account_id WHERE p.id = ${id} FOR UPDATE OF p`
  return row ?? null
}

function proofData(proof: PaymentProof) {
  const scheme = proof.scheme ?? claimScheme(proof.kind, null)
  return {
    scheme,
    protocol: protocolOf(scheme),
    transaction: proof.transaction,
    payer: proof.payer,
    amount: toDollars(proof.valueAtomic),
    amount_atomic: proof.valueAtomic.toString(),
  }
}

/**
 * Claims a verified proof for a payment and applies it, in one transaction under the payment's row lock:
 * concurrent proofs for one payment are serialised (it is paid once), and the claims primary key makes a
 * proof count once across calls and payments, on any instance (the watcher's match and a presented hash
 * of the same transaction included).
 */
export async function applyPaymentProof(
  sql: Sql,
  // The block time is the claim's horizon_at: a replay of the hash computes the same and meets this claim.
  q: {
    paymentId: string
    proof: PaymentProof & { proofAtMs: number }
    ownerShareBps: number
    view: PaymentView
  },
): Promise<ApplyOutcome> {
  const { proof } = q
  return (await sql.begin(async (tx) => {
    let payment = await lockPayment(tx, q.paymentId)
    if (!payment) return { kind: 'not_found' }
    // A pending payment past its expiry is expired now, in this transaction, before anything is applied.
    const expired = await expireLocked(tx, payment, q.view)
    if (expired) payment = { ...payment, ...expired }
    const payable = payment.status === 'pending'
    const claimed = await tx`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status, captured_at,
                          proof_at, horizon_at)
      SELECT ${proof.proofKey}, ${proof.kind}, 'payment', ${payment.id}, ${payment.account_id}, ${proof.payer},
             ${proof.valueAtomic}, ${payable ? 'applied' : 'refund_due'}, ${payable ? tx`now()` : null}, p.at,
             claim_horizon_at(${proof.kind}, p.at, NULL)
      FROM (SELECT ${new Date(proof.proofAtMs)}::timestamptz AS at) p
      ON CONFLICT (proof_key, horizon_at) DO NOTHING RETURNING proof_key`
    if (claimed.length === 0) return { kind: 'proof_already_used' }
    if (!payable) {
      const reason =
        payment.status === 'paid' ? 'already_paid' : payment.status === 'canceled' ? 'canceled' : 'expired'
      await scheduleRefund(tx, payment, { ...proof, reason }, q.view)
      return { kind: 'refund_scheduled', reason, payment }
    }
    return receive(tx, payment, proof, q)
  })) as ApplyOutcome
}

/** pending → pending (underpaid) or paid: adds a claimed proof's value to the payment. */
async function receive(
  tx: Tx,
  payment: CheckoutPaymentRow,
  proof: PaymentProof,
  q: { ownerShareBps: number; view: PaymentView },
): Promise<ApplyOutcome> {
  const received = payment.amount_received_atomic + proof.valueAtomic
  // Paid once the price is covered; the offset is only the figure's tag, never owed by a hash payer.
  const paid = received >= payment.amount_atomic
  const [row] = await tx<PaymentRow[]>`
    UPDATE payments SET amount_received_atomic = ${received},
      status = ${paid ? 'paid' : 'pending'},
      paid_at = ${paid ? tx`now()` : null},
      transaction = ${paid ? proof.transaction : payment.transaction},
      payer = ${paid ? proof.payer : payment.payer}
    WHERE id = ${payment.id} AND status = 'pending'
    RETURNING ${tx.unsafe(PAYMENT_COLUMNS)}`
  let after = row!
  if (!paid) after = await reserveTopUp(tx, after)
  await addTimeline(tx, payment.id, 'proof_applied', {
    ...proofData(proof),
    amount_received_atomic: received.toString(),
    amount_due_atomic: amountDue(after).toString(),
  })
  if (paid) await bookPaid(tx, { ...payment, ...after }, proof, q)
  else {
    await insertEvent(tx, {
      accountId: payment.account_id,
      type: 'payment.underpaid',
      data: { ...presentPayment(after, q.view), proof: proofData(proof) },
    })
  }
  return { kind: 'applied', paid, payment: after }
}

/**
 * An underpaid payment asks for the rest under a figure of its own (the remainder, or the next free figure
 * above it), so a plain top-up transfer is matched too. The old figure is held for this payment.
 */
async function reserveTopUp(tx: Tx, p: PaymentRow): Promise<PaymentRow> {
  const remainder = amountDue(p)
  const figure = await reserveFigure(tx, { paymentId: p.id, baseAtomic: remainder, firstOffsetAtomic: 0n })
  // None free: the old figure stays open; the rest can still be paid by presenting the transaction hash.
  if (figure === null) return p
  await keepCreatedLine(tx, p.id)
  await tx`
    UPDATE checkout_amounts SET held_until = now() + ${FIGURE_HOLD_MS} * interval '1 millisecond'
    WHERE payment_id = ${p.id} AND held_until IS NULL AND amount_atomic <> ${figure}`
  const [row] = await tx<PaymentRow[]>`
    UPDATE payments SET amount_requested_atomic = ${p.amount_received_atomic + figure}
    WHERE id = ${p.id} AND status = 'pending'
    RETURNING ${tx.unsafe(PAYMENT_COLUMNS)}`
  return row!
}

/** At paid: owner share + fee of what was booked, the surplus owed back, the figure held, the event. */
async function bookPaid(
  tx: Tx,
  payment: CheckoutPaymentRow,
  proof: PaymentProof,
  q: { ownerShareBps: number; view: PaymentView },
): Promise<void> {
  const surplus = amountSurplus(payment)
  const booked = payment.amount_received_atomic - surplus
  const { owner, fee } = splitOwnerShare(booked, q.ownerShareBps)
  await tx`
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id) VALUES
      (${payment.account_id}, 'owner_share', ${payment.owner_wallet}, ${owner}, 'payment', ${payment.id}),
      (${payment.account_id}, 'fee', NULL, ${fee}, 'payment', ${payment.id})`
  await holdFigures(tx, payment.id)
  await addTimeline(tx, payment.id, 'paid', {
    transaction: proof.transaction,
    amount_received_atomic: payment.amount_received_atomic.toString(),
    amount_booked_atomic: booked.toString(),
    amount_surplus_atomic: surplus.toString(),
    owner_share_atomic: owner.toString(),
    fee_atomic: fee.toString(),
  })
  await insertEvent(tx, {
    accountId: payment.account_id,
    type: 'payment.received',
    data: { ...presentPayment(payment, q.view), proof: proofData(proof) },
  })
  if (surplus > 0n) {
    // The claim stays 'applied' (it paid the payment); only its surplus is owed back to its sender.
    await scheduleRefund(tx, payment, { ...proof, valueAtomic: surplus, reason: 'overpaid' }, q.view)
  }
}

/** A claimed amount the payment cannot keep: owed back to its sender (ledger), on the timeline, as an event. */
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

/** applied → refund_due: the held proofs of a payment that will never complete go back to their senders. */
async function refundHeldProofs(
  tx: Tx,
  payment: PaymentRow,
  reason: string,
  view: PaymentView,
): Promise<void> {
  // x402 authorizations not sent yet are simply never sent: no money moved, nothing to give back. One the
  // batcher already recorded may be on chain: it stays, and is refunded when it settles.
  await tx`
    UPDATE claims SET status = 'void'
    WHERE target_type = 'payment' AND target_id = ${payment.id} AND status = 'settling' AND settlement_tx IS NULL`
  const held = await tx<{ proof_key: string; payer: string; amount_atomic: bigint }[]>`
    UPDATE claims SET status = 'refund_due'
    WHERE target_type = 'payment' AND target_id = ${payment.id} AND status = 'applied'
    RETURNING proof_key, payer, amount_atomic`
  for (const c of held) {
    const transaction = c.proof_key.startsWith('tx:') ? c.proof_key.slice(3) : c.proof_key
    await scheduleRefund(
      tx,
      payment,
      { proofKey: c.proof_key, payer: c.payer, valueAtomic: c.amount_atomic, transaction, reason },
      view,
    )
  }
}

// ── x402 authorizations ─────────────────────────────────────────────────────────────────────────────

export interface PaymentAuthorization {
  proofKey: string
  payer: string
  valueAtomic: bigint
  /** The signed authorization, kept with the claim: the settlement batcher submits it. */
  authorization: object
}

export type HoldOutcome =
  | { kind: 'not_found' }
  /** Paid, expired or canceled: the authorization is not claimed and will never be settled. */
  | { kind: 'closed'; payment: PaymentRow }
  /** Less than the price still due: not claimed (an x402 client signs what the 402 asks). */
  | { kind: 'underpaid'; payment: PaymentRow; dueAtomic: bigint }
  | { kind: 'proof_already_used' }
  | { kind: 'held'; payment: PaymentRow }

/** What an x402 authorization must cover: the price still due (the figure's offset tags transfers only). */
export function priceDue(p: Pick<PaymentRow, 'amount_atomic' | 'amount_received_atomic'>): bigint {
  const due = p.amount_atomic - p.amount_received_atomic
  return due > 0n ? due : 0n
}

/**
 * ∅ → settling: a verified x402 authorization is claimed for a pending payment it covers, under the
 * payment's row lock. The payment stays pending: it is paid only once the authorization is settled on chain
 * (applySettledAuthorizations), through the same `receive` as a transaction hash.
 */
export async function holdPaymentAuthorization(
  sql: Sql,
  q: { paymentId: string; proof: PaymentAuthorization; view: PaymentView },
): Promise<HoldOutcome> {
  const { proof } = q
  return (await sql.begin(async (tx) => {
    let payment = await lockPayment(tx, q.paymentId)
    if (!payment) return { kind: 'not_found' }
    const expired = await expireLocked(tx, payment, q.view)
    if (expired) payment = { ...payment, ...expired }
    if (payment.status !== 'pending') return { kind: 'closed', payment }
    const due = priceDue(payment)
    if (proof.valueAtomic < due) return { kind: 'underpaid', payment, dueAtomic: due }
    // The payer's reservation lock (migration 0045): a metered claim of the same payer summing its unsettled
    // authorizations on another connection waits for this row, or sees it committed.
    await tx`SELECT pg_advisory_xact_lock(3009, hashtext(lower(${proof.payer})))`
    const claimed = await tx`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          authorization_payload, horizon_at)
      SELECT ${proof.proofKey}, 'eip3009', 'payment', ${payment.id}, ${payment.account_id}, ${proof.payer},
             ${proof.valueAtomic}, 'settling', a.auth, claim_horizon_at('eip3009', NULL, a.auth)
      FROM (SELECT ${tx.json(proof.authorization as never)}::jsonb AS auth) a
      ON CONFLICT (proof_key, horizon_at) DO NOTHING RETURNING proof_key`
    if (claimed.length === 0) return { kind: 'proof_already_used' }
    await addTimeline(tx, payment.id, 'authorization_received', {
      payer: proof.payer,
      amount: toDollars(proof.valueAtomic),
      amount_atomic: proof.valueAtomic.toString(),
    })
    return { kind: 'held', payment }
  })) as HoldOutcome
}

/**
 * settling → applied | refund_due, in the settlement batcher's transaction (which already holds the payments'
 * row locks): a settled authorization pays its payment if still pending — the same `receive` as a hash,
 * its settlement transaction as the payment's — or, if the payment closed meanwhile, is owed back to its
 * sender like any proof that arrives late.
 */
export async function applySettledAuthorizations(
  tx: Tx,
  q: { proofKeys: string[]; ownerShareBps: number; view: PaymentView },
): Promise<void> {
  const held = await tx<
    {
      proof_key: string
      target_id: string
      payer: string
      amount_atomic: bigint
      settlement_tx: string
      authorization_payload: unknown
    }[]
  >`
    SELECT proof_key, target_id, payer, amount_atomic, settlement_tx, authorization_payload FROM claims
    WHERE proof_key = ANY(${q.proofKeys}::text[]) AND status = 'settling' AND settled_at IS NOT NULL
    ORDER BY target_id, proof_key`
  for (const c of held) {
    let payment = await lockPayment(tx, c.target_id)
    if (!payment) continue
    const expired = await expireLocked(tx, payment, q.view)
    if (expired) payment = { ...payment, ...expired }
    const proof: PaymentProof = {
      proofKey: c.proof_key,
      kind: 'eip3009',
      payer: c.payer,
      valueAtomic: c.amount_atomic,
      transaction: c.settlement_tx,
      scheme: claimScheme('eip3009', c.authorization_payload) ?? undefined,
    }
    if (payment.status === 'pending') {
      await tx`
        UPDATE claims SET status = 'applied', captured_at = now()
        WHERE proof_key = ${c.proof_key} AND status = 'settling'`
      await receive(tx, payment, proof, q)
      continue
    }
    await tx`UPDATE claims SET status = 'refund_due' WHERE proof_key = ${c.proof_key} AND status = 'settling'`
    const reason =
      payment.status === 'paid' ? 'already_paid' : payment.status === 'canceled' ? 'canceled' : 'expired'
    await scheduleRefund(tx, payment, { ...proof, reason }, q.view)
  }
}

// ── closing ──────────────────────────────────────────────────────────────────────────────────────────

/** pending → expired when overdue (the caller holds the row lock); null when it did not apply. */
async function expireLocked(tx: Tx, payment: PaymentRow, view: PaymentView): Promise<PaymentRow | null> {
  const [expired] = await tx<PaymentRow[]>`
    UPDATE payments SET status = 'expired'
    WHERE id = ${payment.id} AND status = 'pending' AND expires_at <= now()
    RETURNING ${tx.unsafe(PAYMENT_COLUMNS)}`
  if (!expired) return null
  await holdFigures(tx, payment.id)
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
 * Expires pending payments past expires_at, a batch at a time, each batch in its own transaction.
 * SKIP LOCKED: a payment being paid right now is left to that transaction (it expires it itself if due).
 */
export async function expireDuePayments(sql: Sql, q: { view: PaymentView; batch?: number }): Promise<number> {
  const batch = q.batch ?? 100
  let total = 0
  for (;;) {
    const n = (await sql.begin(async (tx) => {
      const due = await tx<PaymentRow[]>`
        SELECT ${tx.unsafe(PAYMENT_COLUMNS)} FROM payments
        WHERE status = 'pending' AND expires_at <= now()
        ORDER BY expires_at LIMIT ${batch}
        FOR UPDATE SKIP LOCKED`
      for (const p of due) await expireLocked(tx, p, q.view)
      return due.length
    })) as number
    total += n
    if (n < batch) return total
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
    const expired = await expireLocked(tx, payment, q.view)
    if (expired) return { kind: 'invalid_state', payment: expired }
    const [row] = await tx<PaymentRow[]>`
      UPDATE payments SET status = 'canceled', canceled_at = now()
      WHERE id = ${payment.id} AND status = 'pending' AND expires_at > now()
      RETURNING ${tx.unsafe(PAYMENT_COLUMNS)}`
    if (!row) return { kind: 'invalid_state', payment }
    await holdFigures(tx, payment.id)
    await addTimeline(tx, payment.id, 'canceled', {})
    await refundHeldProofs(tx, row, 'canceled', q.view)
    return { kind: 'canceled', payment: row }
  })) as CancelOutcome
}

// ── unmatched inflows ────────────────────────────────────────────────────────────────────────────────

export interface InflowSeen {
  hash: string
  payer: string
  valueAtomic: bigint
  blockNumber: bigint
}

/**
 * ∅ → recorded: transfers no figure matched. One statement per watcher range; a hash some proof already
 * claimed (a metered call presented it first) is not unmatched and is skipped. Returns the rows written.
 */
export async function recordUnmatchedInflows(db: Sql | Tx, inflows: InflowSeen[]): Promise<number> {
  if (inflows.length === 0) return 0
  const rows = await db`
    INSERT INTO unmatched_inflows (tx_hash, payer, amount_atomic, block_number)
    SELECT i.hash, i.payer, i.amount, i.block
    FROM unnest(${inflows.map((i) => i.hash.toLowerCase())}::text[], ${inflows.map((i) => i.payer)}::text[],
                ${inflows.map((i) => i.valueAtomic.toString())}::bigint[],
                ${inflows.map((i) => i.blockNumber.toString())}::bigint[]) AS i(hash, payer, amount, block)
    WHERE NOT EXISTS (SELECT 1 FROM claims c WHERE c.proof_key = 'tx:' || i.hash)
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING tx_hash`
  return rows.length
}
