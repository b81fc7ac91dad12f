// Claims and calls: a proof is claimed before the upstream is called, captured (with its call row, and for a
// transaction hash its revenue, booked per capture batch) when the upstream answered, released when the
// upstream failed, and refunded (tx) or voided (x402) when its window ends uncaptured. Each function's SQL
// states its precondition.

import type { PendingQuery, Row } from 'postgres'
import type { Sql, Tx } from '../db/sql.ts'
import type { CallAgent } from '../identity/call-agent.ts'
import { batchRevenueEntries, unusedCeilingRefunds } from './ledger.ts'
import type { Applied, Refusal } from './transitions.ts'

type Db = Sql | Tx

export interface ClaimRequest {
  proofKey: string
  /** batch: an x402 batch-settlement voucher increment (src/books/channels.ts); upto: a Permit2 upto permit. */
  kind: 'tx' | 'eip3009' | 'batch' | 'upto'
  targetType: 'call' | 'payment'
  targetId: string
  accountId: string
  payer: string
  amountAtomic: bigint
  /** Until when an uncaptured claim may be retried on the same target (after an explicit release). */
  retryWindowMs: number
  /** How long the winning request holds the proof; past it, an unreleased claim is in doubt. */
  leaseMs: number
  /** An EIP-3009 authorization to settle later (x402 payments); null for a transaction hash. */
  authorization: object | null
  /**
   * A transaction's block time (ms), required for kind tx (null for the others): the prune compares it with
   * the stored horizon (chain clock), and it is the claim's horizon_at, the day partition a replay meets it
   * in (migration 0055; an authorization's or permit's comes from its signed validBefore or deadline).
   */
  proofAtMs: number | null
  /**
   * Names this one claim statement (the batch writer sets it): a claim whose write failed without an answer
   * may still have committed, and is found again by it (releaseUnacknowledgedClaims).
   */
  attemptToken?: string
  /**
   * x402 exact and upto: the payer's balance as last read and the block it was read at. The claim wins only
   * if the balance covers it (an upto permit: its maximum) on top of what the payer's other authorizations
   * and permits still hold (claimAndCapture, the payer reservation). Absent: no funds check here
   * (checkout), but the claim still takes the payer's lock.
   */
  reserve?: { balanceAtomic: bigint; block: bigint } | null
}

/**
 * won: this request holds the proof (a fresh claim, or a retry after a release); `attempt` names it for
 * its release. busy: another request holds it right now (lease live, or run out too lately to be sure, see
 * DOUBT_GRACE_MS) — it may come free. used: it paid for something else, was captured, is in doubt (lease
 * ran out without a release), or its window is over.
 */
export type ClaimResult =
  /** horizonAt: the claim's partition key as PostgreSQL prints it, for its capture (Capture.horizonAt). */
  | { outcome: 'won'; attempt: number; horizonAt: string }
  | { outcome: 'busy' }
  | { outcome: 'used' }
  | { outcome: 'insufficient_funds' }

export interface Capture {
  callId: string
  proofKey: string
  endpointId: string
  accountId: string
  ownerWallet: string
  payer: string
  amountAtomic: bigint
  ownerShareAtomic: bigint
  feeAtomic: bigint
  upstreamStatus: number
  method: string
  /** How the call was priced, and for usage pricing what was measured (stored on the call row). */
  pricing?: CapturePricing
  /** The scheme that paid, and the receipt id the answer carried. */
  scheme?: string | null
  receiptId?: string | null
  /** Told once this capture's write committed (applied: the claim moved to captured), for a settlement
   * that must find the claim captured before it broadcasts its transaction. Not written to the database. */
  onWritten?: (applied: boolean) => void
  /**
   * Settled before the answer: the signed settlement transaction that carries this authorization, and its
   * place in it, recorded in the capture's own commit (before the broadcast, as recordSettlementTx would).
   */
  settlement?: { hash: string; index: number; count: number } | null
  /** The MCP tool a paid `tools/call` named. */
  tool?: string | null
  /** Who called and the rule that priced it (an endpoint with identity rules; migration 0070). */
  agent?: CallAgent | null
  /** The claim's horizon_at as its claim returned it: the capture then touches that day's partition only. */
  horizonAt?: string | null
  /**
   * What the answer delivered (hex SHA-256 of the body as sent, its length), when it ended before this
   * capture was written: the call row carries it (migration 0057). Set only while `sent` is not.
   */
  delivery?: { bodySha256: string; bodyBytes: number } | null
  /** Set by the batch writer when a statement took this capture: a delivery can no longer ride with it. */
  sent?: boolean
}

export interface CapturePricing {
  model: 'fixed' | 'rules' | 'usage'
  unit: string | null
  /** Quantities measured, and whether a fallback rule priced the call (JSON on the call row). */
  usage: object | null
  ceilingAtomic: bigint | null
  /** Paid above the charge by a prepaid ceiling (a transaction hash): owed back to the payer. */
  refundAtomic: bigint
}

export interface BooksBatchResult {
  claims: ClaimResult[]
  /** Proof keys whose capture applied in this statement (the others were already captured or closed). */
  captured: Set<string>
}

/**
 * claimProof and captureClaim for many proofs in ONE statement (one commit): the captures of the calls
 * served since the last batch ride with the next claims. A proof may not appear in both lists (the writer
 * answers such a claim 'used' itself): one statement must not touch a row twice.
 *
 * A conflicting claim is taken over only when it is uncaptured, on the same target, inside its window, and
 * every earlier attempt was released (releases = attempts). An expired lease alone never frees a proof.
 * A capture applies only to a claim still 'claimed'. The transaction-hash captures that apply are booked
 * as one owner share and one fee entry per account for the whole statement, each call naming the batch
 * (calls.ledger_batch_id, migration 0050); x402 captures book no revenue (their settlement does, per batch).
 * An x402 exact or upto claim also reserves its amount against the payer's balance read (see
 * reservedClaims): the payer reservation, one for both schemes, since both draw on the same wallet.
 *
 * The statement holds only the parts its batch uses (statementParts): a part left out costs no executor
 * start-up over the claims partitions, and a ledger insert left out fires no balance trigger (a statement
 * trigger runs even for no rows). Each combination is its own prepared statement, with its own plan.
 */
export async function claimAndCapture(
  db: Db,
  batch: { claims: ClaimRequest[]; captures: Capture[] },
  doubtGraceMs = DOUBT_GRACE_MS,
): Promise<BooksBatchResult> {
  const r = batch.claims
  if (r.length === 0 && batch.captures.length === 0) return { claims: [], captured: new Set() }
  const rows = await db<
    { what: 'claim' | 'capture' | 'short'; proof_key: string; attempts: number; horizon_at: string | null }[]
  >`${statementParts(db, batch)}`
  // (new_calls and revenue run although nothing reads them: PostgreSQL always completes a modifying CTE.)
  const won = new Map<string, { attempt: number; horizonAt: string }>()
  const captured = new Set<string>()
  const short = new Set<string>()
  for (const row of rows) {
    if (row.what === 'claim') won.set(row.proof_key, { attempt: row.attempts, horizonAt: row.horizon_at! })
    else if (row.what === 'capture') captured.add(row.proof_key)
    else short.add(row.proof_key)
  }
  const lost = r.filter((x) => !won.has(x.proofKey) && !short.has(x.proofKey))
  // Rare (replays and races): one more round trip to tell a proof held right now from a spent one.
  const busy = new Set<string>()
  if (lost.length > 0) {
    const found = await db<{ proof_key: string }[]>`
      SELECT k.proof_key FROM claims k
      JOIN unnest(${lost.map((x) => x.proofKey)}::text[], ${lost.map((x) => x.targetId)}::text[])
        AS t(key, tid) ON k.proof_key = t.key
      WHERE k.status = 'claimed' AND k.target_id = t.tid AND k.retry_until > now()
        AND (k.releases = k.attempts OR k.lease_until > now() - ${doubtGraceMs} * interval '1 millisecond')`
    for (const f of found) busy.add(f.proof_key)
  }
  const claims: ClaimResult[] = r.map((x) => {
    const attempt = won.get(x.proofKey)
    if (attempt !== undefined) return { outcome: 'won', ...attempt }
    if (short.has(x.proofKey)) return { outcome: 'insufficient_funds' }
    return { outcome: busy.has(x.proofKey) ? 'busy' : 'used' }
  })
  return { claims, captured }
}

/**
 * How long after a claim's lease ran out an unreleased claim is still answered busy (409, retry) rather than
 * used (402, in doubt for good): its holder may be alive and about to write its outcome. A claim statement
 * that committed unanswered is released by its writer once the database answers again
 * (releaseUnacknowledgedClaims), and a served call's capture is retried until written; both wait for the
 * database, retried at most a second apart. Without the grace, a lease that ran out during a PostgreSQL
 * restart turned a claim that forwarded nothing into a final refusal, and the proof served after all once
 * its release landed (the schemes chaos round: a permit refused as proof_already_used, then served on its
 * replay). A writer that saw the database away widens it by the outage (BatchWriter.doubtGraceMs).
 */
export const DOUBT_GRACE_MS = 5_000

/**
 * The claim part: the claims of this batch, each inserted or, when its proof was released, taken over; with
 * x402 exact or upto claims among them, checked first against the payer reservation (reservedClaims).
 */
function claimedCtes(db: Db, claimsDoc: string, reserving: boolean, upto: boolean) {
  const checked = reserving
    ? reservedClaims(db, upto)
    : db`checked AS (SELECT r.*, true AS funded FROM req r)`
  return db`
    req AS MATERIALIZED (
      SELECT * FROM json_to_recordset(${claimsDoc}::text::json)
        AS t(i int, proof_key text, kind text, target_type text, target_id text, account_id text, payer text,
             amount bigint, retry_ms bigint, lease_ms bigint, "authorization" jsonb, proof_at_ms bigint,
             attempt_token text, balance bigint, balance_block bigint)
    ),
    ${checked},
    won AS (
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          retry_until, lease_until, authorization_payload, proof_at, attempt_token, horizon_at)
      SELECT proof_key, kind, target_type, target_id, account_id, payer, amount, 'claimed',
             now() + retry_ms * interval '1 millisecond', now() + lease_ms * interval '1 millisecond',
             "authorization", to_timestamp(proof_at_ms / 1000.0), attempt_token,
             claim_horizon_at(kind, to_timestamp(proof_at_ms / 1000.0), "authorization")
      FROM checked WHERE funded
      ON CONFLICT (proof_key, horizon_at) DO UPDATE
        SET lease_until = EXCLUDED.lease_until, attempts = claims.attempts + 1,
            attempt_token = EXCLUDED.attempt_token
        WHERE claims.status = 'claimed' AND claims.target_id = EXCLUDED.target_id
          AND claims.retry_until > now() AND claims.releases = claims.attempts
      RETURNING proof_key, attempts, horizon_at
    )`
}

/**
 * The payer reservation's parts: each payer's sum under its lock, the claims it funds, those it refuses.
 * `upto`: the batch has upto claims, which also need the payer's Permit2 allowance to themselves around an
 * eip2612GasSponsoring approval (uptoAllowanceRule).
 */
function reservedClaims(db: Db, upto: boolean) {
  const open = upto
    ? db`CASE WHEN has_upto THEN payer_upto_open(payer_l, approval_nonce) END`
    : db`NULL::text`
  return db`
    -- The payer reservation (x402 exact and upto): an authorization or permit is claimed only if
    --   balance (as read at balance_block) - payer_reserved(payer, balance_block) - earlier ones of this
    --   statement (either kind) >= its amount (an upto permit's amount: its signed maximum)
    -- where payer_reserved (migrations 0045, 0065) sums what the payer's authorizations and permits not yet
    -- settled still hold (an upto permit: its maximum while claimed, its charge once captured) plus those
    -- settled in a block after the read, on every instance. Why that is never an over-serve:
    -- * Across instances: payer_reserved takes the payer's advisory lock, then sums with a fresh snapshot;
    --   every claim of an authorization or permit takes that lock here and holds it to its commit, so a
    --   concurrent claim of the payer is either committed (in the sum) or waits for ours (and then sees ours).
    -- * Settlement: settleAuthorizations and settleUptoClaims move a row from unsettled to settled-at-block in
    --   one commit, so any snapshot counts it once, as unsettled or, while its block is after the read, as
    --   landed; once its block is at or before the read, the balance itself shows the transfer. A failed or
    --   expired settlement (settlement_error) or a voided claim leaves the sum: that money never moves.
    -- * Counted twice (a false refusal, never an over-serve): a settlement mined at or before the read but
    --   not booked yet, or one whose block is unknown (counted for two minutes). Both end within seconds
    --   of the batcher's next run; the payer retries.
    -- The locks are taken in hashtext order, all of them before the first row below is written (the window
    -- sum reads every row of "payers" first), so two batches never wait on each other crosswise.
    payers AS MATERIALIZED (
      SELECT payer_l, payer_reserved(payer_l, since) AS reserved, ${open} AS upto_open FROM (
        SELECT lower(payer) AS payer_l, min(balance_block) AS since, bool_or(kind = 'upto') AS has_upto,
               -- The chain's EIP-2612 nonce, as the sponsored permits' approvals were checked against it.
               min(("authorization"->'permit2612'->>'nonce')::numeric) AS approval_nonce
        FROM req WHERE kind IN ('eip3009', 'upto')
        GROUP BY lower(payer) ORDER BY hashtext(lower(payer)), lower(payer) OFFSET 0
      ) p
    ),
    checked AS MATERIALIZED (
      SELECT r.*, (r.kind NOT IN ('eip3009', 'upto') OR r.balance IS NULL
                   OR sum(r.amount) FILTER (WHERE r.kind IN ('eip3009', 'upto'))
                        OVER (PARTITION BY lower(r.payer) ORDER BY r.i) <= r.balance - p.reserved
                  ) ${upto ? uptoAllowanceRule(db) : db``} AS funded
      FROM req r LEFT JOIN payers p ON r.kind IN ('eip3009', 'upto') AND p.payer_l = lower(r.payer)
    ),
    -- Refused for funds, and not spent or held by anyone (those answer used or busy, as without funds).
    short AS (
      SELECT c.proof_key FROM checked c WHERE NOT c.funded AND NOT EXISTS (
        SELECT 1 FROM claims k WHERE k.proof_key = c.proof_key
          AND NOT (k.status = 'claimed' AND k.lease_until IS NULL AND k.releases = k.attempts))
    )`
}

/**
 * An upto claim and the payer's Permit2 allowance (migration 0081): a sponsored permit (its claim carries
 * the eip2612GasSponsoring approval, which sets the allowance to its own maximum) only when the payer has no
 * other upto permit unsettled, here or earlier in this batch; any other upto permit only while no sponsored
 * one is. Refused like a permit the balance does not cover: the payer pays again once the first settles.
 */
function uptoAllowanceRule(db: Db) {
  const before = db`OVER (PARTITION BY lower(r.payer) ORDER BY r.i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)`
  return db`
    AND (r.kind <> 'upto' OR CASE WHEN r."authorization" ? 'permit2612'
      THEN p.upto_open = 'none' AND count(*) FILTER (WHERE r.kind = 'upto') ${before} = 0
      ELSE p.upto_open <> 'sponsored'
           AND count(*) FILTER (WHERE r.kind = 'upto' AND r."authorization" ? 'permit2612') ${before} = 0
    END)`
}

/** Keys of the x402 kinds, which book no revenue at capture: a batch of only these leaves the ledger parts out. */
const NO_REVENUE_KEY = /^(auth|upto|batch):/

/**
 * The claim/capture statement for this batch: the capture part when it has captures (with the revenue
 * entries unless every capture is an x402 proof, and the claim lookup only for a capture that does not know
 * its claim's day), the claim part when it has claims (with the payer reservation only for x402 exact or
 * upto claims), and the rows each part answers.
 */
function statementParts(db: Db, batch: { claims: ClaimRequest[]; captures: Capture[] }) {
  const c = batch.captures
  const r = batch.claims
  const ctes: PendingQuery<Row[]>[] = []
  const answers: PendingQuery<Row[]>[] = []
  if (c.length > 0) {
    const knowsDay = c.every((x) => x.horizonAt != null)
    const books = !c.every((x) => NO_REVENUE_KEY.test(x.proofKey))
    const refunds = c.some((x) => (x.pricing?.refundAtomic ?? 0n) > 0n)
    ctes.push(capturedCtes(db, capturesJson(c), { knowsDay, books, refunds }))
    answers.push(db`SELECT 'capture' AS what, proof_key, 0 AS attempts, NULL AS horizon_at FROM captured`)
  }
  if (r.length > 0) {
    const upto = r.some((x) => x.kind === 'upto')
    const reserving = upto || r.some((x) => x.kind === 'eip3009')
    ctes.push(claimedCtes(db, claimsJson(r), reserving, upto))
    answers.push(db`SELECT 'claim' AS what, proof_key, attempts, horizon_at::text FROM won`)
    if (reserving) answers.push(db`SELECT 'short', proof_key, 0, NULL FROM short`)
  }
  const withs = ctes.reduce((all, part, i) => (i === 0 ? part : db`${all}, ${part}`))
  const selects = answers.reduce((all, part) => db`${all} UNION ALL ${part}`)
  return db`WITH ${withs} ${selects}`
}

/** The capture part: claims claimed → captured, their call rows, and for transaction hashes the revenue. */
function capturedCtes(
  db: Db,
  capturesDoc: string,
  o: { knowsDay: boolean; books: boolean; refunds: boolean },
) {
  // The claim's day partition (migration 0055): the capture probes that one partition only. A capture that
  // does not know it (none the data plane makes) finds it by its proof key.
  const day = o.knowsDay
    ? db`t.known_horizon_at`
    : db`coalesce(t.known_horizon_at, (SELECT k.horizon_at FROM claims k WHERE k.proof_key = t.proof_key
                                         AND k.status = 'claimed' LIMIT 1))`
  return db`
    cap AS (
      SELECT t.*, ${day} AS horizon_at,
             -- The payer as its address's bytes, or as text when it is not one (migration 0062).
             payer_packed(t.payer) AS payer_address
      FROM json_to_recordset(${capturesDoc}::text::json)
        AS t(call_id text, proof_key text, endpoint_id text, account_id text, owner_wallet text, payer text,
             amount bigint, owner_share bigint, fee bigint, status int, method text, pricing_model text,
             usage_unit text, usage jsonb, ceiling bigint, refund bigint, scheme text, receipt_id text,
             tool text, settlement_tx text, settlement_index int, settlement_count int,
             known_horizon_at timestamptz, body_sha256 text, body_bytes bigint, agent jsonb)
    ),
    captured AS (
      -- A claimed claim has no settlement_tx: a capture settled before the answer brings its own.
      -- The claim names its call: the way from a proof to its call (migration 0059).
      UPDATE claims k SET status = 'captured', captured_at = now(), lease_until = NULL, call_id = i.call_id,
                          settlement_tx = i.settlement_tx, settlement_index = i.settlement_index,
                          settlement_count = i.settlement_count
      FROM cap i WHERE k.proof_key = i.proof_key AND k.horizon_at = i.horizon_at AND k.status = 'claimed'
        -- Without the revenue part, a transaction hash is never captured: it would go unbooked.
        ${o.books ? db`` : db`AND k.kind <> 'tx'`}
      RETURNING k.proof_key, k.kind
    ),
    ${o.books ? revenueCtes(db, o.refunds) : db`ledger_batch AS (SELECT NULL::bigint AS id)`},
    new_calls AS (
      INSERT INTO calls (id, proof, endpoint_id, account_id, payer, payer_address, amount_atomic,
                         owner_share_atomic, fee_atomic, upstream_status, method, pricing_model, usage_unit, usage,
                         ceiling_atomic, refund_atomic, scheme, receipt_id, tool, ledger_batch_id, body_sha256,
                         body_bytes, agent)
      SELECT i.call_id, proof_packed(i.proof_key), i.endpoint_id, i.account_id,
             CASE WHEN i.payer_address IS NULL THEN i.payer END, i.payer_address, i.amount, i.owner_share, i.fee,
             i.status, i.method, i.pricing_model, i.usage_unit, i.usage, i.ceiling, i.refund, i.scheme,
             call_receipt_stored(i.call_id, i.receipt_id), i.tool,
             -- Booked by this statement's batch entries (below); x402 revenue waits for its settlement.
             CASE WHEN k.kind = 'tx' THEN (SELECT id FROM ledger_batch) END,
             decode(i.body_sha256, 'hex'), i.body_bytes, i.agent
      -- One call per proof: captured returns a claim only on its one move claimed → captured (calls is
      -- partitioned by month, so proof_key cannot be a unique key of its own; migration 0041).
      FROM cap i JOIN captured k USING (proof_key)
      RETURNING id
    )`
}

/**
 * The revenue of the transaction-hash captures: the number of this statement's entries (migration 0050),
 * taken only if one applied (read through a scalar subquery, a CTE is evaluated at most once), the batch's
 * owner share and fee entries, and when a capture has one, the unused part of prepaid ceilings owed back.
 */
function revenueCtes(db: Db, refunds: boolean) {
  return db`
    ledger_batch AS MATERIALIZED (SELECT nextval('ledger_batch_ids') AS id),
    revenue AS (
      ${batchRevenueEntries(db, {
        calls: db`(SELECT i.* FROM cap i JOIN captured k USING (proof_key) WHERE k.kind = 'tx')`,
        batchId: db`(SELECT id FROM ledger_batch)`,
        source: 'capture_batch',
      })}
      RETURNING 1
    )${refunds ? unusedRefunds(db) : db``}`
}

/** The unused part of prepaid ceilings (transaction hashes priced by usage), owed back to their payers. */
function unusedRefunds(db: Db) {
  return db`,
    unused AS (
      ${unusedCeilingRefunds(db, db`(SELECT i.* FROM cap i JOIN captured k USING (proof_key) WHERE k.kind = 'tx' AND i.refund > 0)`)}
      RETURNING 1
    )`
}

// Two JSON documents instead of 21 arrays: one parameter each, serialized natively (JSON.stringify) rather
// than element by element by the driver; amounts travel as strings and are read as bigint.
function capturesJson(c: Capture[]): string {
  return JSON.stringify(
    c.map((x) => ({
      call_id: x.callId,
      proof_key: x.proofKey,
      endpoint_id: x.endpointId,
      account_id: x.accountId,
      owner_wallet: x.ownerWallet,
      payer: x.payer,
      amount: x.amountAtomic.toString(),
      owner_share: x.ownerShareAtomic.toString(),
      fee: x.feeAtomic.toString(),
      status: x.upstreamStatus,
      method: x.method,
      pricing_model: x.pricing?.model ?? 'fixed',
      usage_unit: x.pricing?.unit ?? null,
      usage: x.pricing?.usage ?? null,
      ceiling: x.pricing?.ceilingAtomic?.toString() ?? null,
      refund: (x.pricing?.refundAtomic ?? 0n).toString(),
      scheme: x.scheme ?? null,
      receipt_id: x.receiptId ?? null,
      tool: x.tool ?? null,
      settlement_tx: x.settlement?.hash ?? null,
      settlement_index: x.settlement?.index ?? null,
      settlement_count: x.settlement?.count ?? null,
      known_horizon_at: x.horizonAt ?? null,
      body_sha256: x.delivery?.bodySha256 ?? null,
      body_bytes: x.delivery?.bodyBytes ?? null,
      agent: x.agent ?? null,
    })),
  )
}

function claimsJson(r: ClaimRequest[]): string {
  return JSON.stringify(
    r.map((x, i) => ({
      i,
      proof_key: x.proofKey,
      kind: x.kind,
      target_type: x.targetType,
      target_id: x.targetId,
      account_id: x.accountId,
      payer: x.payer,
      amount: x.amountAtomic.toString(),
      retry_ms: x.retryWindowMs,
      lease_ms: x.leaseMs,
      authorization: x.authorization,
      proof_at_ms: x.proofAtMs ?? null,
      attempt_token: x.attemptToken ?? null,
      balance: x.reserve?.balanceAtomic.toString() ?? null,
      balance_block: x.reserve?.block.toString() ?? null,
    })),
  )
}

/** One claim (checkout and tests); the data plane batches through the writer. */
export async function claimProof(db: Db, req: ClaimRequest): Promise<ClaimResult> {
  const result = await claimAndCapture(db, { claims: [req], captures: [] })
  return result.claims[0]!
}

/** One capture, outside a batch (tests, tools). Refused unless the claim is still 'claimed'. */
export async function captureClaim(db: Db, capture: Capture): Promise<Applied> {
  const result = await claimAndCapture(db, { claims: [], captures: [capture] })
  return result.captured.has(capture.proofKey) ? { ok: true } : refusal(db, capture.proofKey)
}

/**
 * The request holding attempt `attempt` failed upstream (unreachable, timeout, 5xx) or never forwarded:
 * free the proof for a retry within its window. Applies once per attempt, and only while still claimed.
 */
export async function releaseClaim(db: Db, q: { proofKey: string; attempt: number }): Promise<Applied> {
  const rows = await db`
    UPDATE claims SET lease_until = NULL, releases = releases + 1
    WHERE proof_key = ${q.proofKey} AND status = 'claimed'
      AND attempts = ${q.attempt} AND releases = ${q.attempt - 1}
    RETURNING 1`
  if (rows.length > 0) return { ok: true }
  const refused = await refusal(db, q.proofKey)
  return refused.status === 'claimed' ? { ...refused, reason: 'not_held' } : refused
}

/**
 * Claim statements that failed without an answer (the connection went down around the commit): their
 * requests were answered 503 and forwarded nothing, but a write may have committed all the same, leaving the
 * proof held by nobody until its lease ran out, then in doubt (refused, refunded at the end of its window).
 * Each attempt that did commit is released here, as releaseClaim would have; one that did not, or was taken
 * over since (another token), is left alone. Returns how many were released.
 */
export async function releaseUnacknowledgedClaims(
  db: Db,
  attempts: ReadonlyArray<{ proofKey: string; token: string }>,
): Promise<number> {
  if (attempts.length === 0) return 0
  const rows = await db`
    UPDATE claims k SET lease_until = NULL, releases = k.releases + 1
    FROM unnest(${attempts.map((a) => a.proofKey)}::text[], ${attempts.map((a) => a.token)}::text[])
      AS t(key, token)
    WHERE k.proof_key = t.key AND k.attempt_token = t.token AND k.status = 'claimed'
      AND k.releases = k.attempts - 1
    RETURNING 1`
  return rows.length
}

/** Claims whose window is over and whose last holder is gone (released, or lease run out: in doubt). */
const EXPIRED = (db: Db, kinds: Array<'tx' | 'eip3009' | 'upto'>) => db`
  status = 'claimed' AND kind = ANY(${kinds}::text[]) AND target_type = 'call' AND retry_until < now()
  AND (lease_until IS NULL OR lease_until < now())`

/**
 * A transaction proof never captured by the end of its window is owed back to its payer: refund_due and a
 * refund entry, in one statement, once. Without proofKey: every expired claim (the expiry job).
 */
export async function markRefundDue(db: Db, q: { proofKey?: string } = {}): Promise<Applied<{ n: number }>> {
  const rows = await db`
    WITH expired AS (
      UPDATE claims SET status = 'refund_due', lease_until = NULL
      WHERE ${EXPIRED(db, ['tx'])} ${q.proofKey === undefined ? db`` : db`AND proof_key = ${q.proofKey}`}
      RETURNING proof_key, account_id, payer, amount_atomic
    )
    INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
    SELECT account_id, 'refund', payer, amount_atomic, 'claim', proof_key FROM expired
    RETURNING id`
  if (rows.length > 0 || q.proofKey === undefined) return { ok: true, n: rows.length }
  return expiryRefusal(db, q.proofKey)
}

/** An x402 authorization or upto permit never captured by the end of its window: never settled, nothing to refund. */
export async function voidClaim(db: Db, q: { proofKey?: string } = {}): Promise<Applied<{ n: number }>> {
  const rows = await db`
    UPDATE claims SET status = 'void', lease_until = NULL
    WHERE ${EXPIRED(db, ['eip3009', 'upto'])} ${q.proofKey === undefined ? db`` : db`AND proof_key = ${q.proofKey}`}
    RETURNING 1`
  if (rows.length > 0 || q.proofKey === undefined) return { ok: true, n: rows.length }
  return expiryRefusal(db, q.proofKey)
}

export interface RefundedClaim {
  proof_key: string
  target_type: string
  target_id: string
  account_id: string
  payer: string
  amount_atomic: bigint
  kind: string
  /** The stored authorization (null for a transaction hash): an MPP one says so. */
  authorization_payload: unknown
}

/** The refunds in a confirmed payout: their claims turn refunded (only from refund_due). */
export async function markRefunded(tx: Tx, q: { payoutId: string }): Promise<RefundedClaim[]> {
  return tx<RefundedClaim[]>`
    UPDATE claims c SET status = 'refunded'
    FROM ledger_entries e
    WHERE e.payout_id = ${q.payoutId} AND e.kind = 'refund' AND e.source_type = 'claim'
      AND c.proof_key = e.source_id AND c.status = 'refund_due'
    RETURNING c.proof_key, c.target_type, c.target_id, c.account_id, c.payer, e.amount_atomic, c.kind,
              c.authorization_payload`
}

async function refusal(db: Db, proofKey: string): Promise<Refusal> {
  const [row] = await db<{ status: string }[]>`SELECT status FROM claims WHERE proof_key = ${proofKey}`
  return row
    ? { ok: false, reason: 'wrong_state', status: row.status }
    : { ok: false, reason: 'not_found', status: null }
}

async function expiryRefusal(db: Db, proofKey: string): Promise<Refusal> {
  const [row] = await db<{ status: string; open: boolean; held: boolean }[]>`
    SELECT status, retry_until >= now() AS open, coalesce(lease_until >= now(), false) AS held
    FROM claims WHERE proof_key = ${proofKey}`
  if (!row) return { ok: false, reason: 'not_found', status: null }
  if (row.status !== 'claimed') return { ok: false, reason: 'wrong_state', status: row.status }
  return {
    ok: false,
    reason: row.open ? 'retry_window_open' : row.held ? 'lease_held' : 'wrong_state',
    status: row.status,
  }
}
