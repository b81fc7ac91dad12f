// Passes ("pay once, access many"): a pass is opened from its purchase's captured claim (the money is that
// call's: owner share and fee booked by captureClaim like any served call), then drawn one use per
// signed-in call and given a use back when the upstream certainly did not serve it. The use count lives
// only here, in PostgreSQL: every instance draws with one UPDATE whose precondition is in its SQL, so N
// uses are served exactly N times however many instances draw at once.
import type { Sql, Tx } from '../db/sql.ts'

type Db = Sql | Tx

/** What the purchase bought: a count of calls, a duration, or both (the endpoint's terms when it was paid). */
export interface PassTerms {
  calls: number | null
  durationS: number | null
}

export interface PassRow {
  id: string
  proof_key: string
  call_id: string
  endpoint_id: string
  payer: string
  price_atomic: bigint
  calls_total: number | null
  uses_left: number | null
  expires_at: Date
  created_at: Date
}

const PASS_COLUMNS =
  'id, proof_key, call_id, endpoint_id, payer, price_atomic, calls_total, uses_left, expires_at, created_at'

/**
 * openPass: pass ∅ → open, from a purchase already captured (claim 'captured', its call row the PASS call
 * of this endpoint). Idempotent: a retry of the same purchase gets the same pass (proof_key is unique).
 * Returns the pass, or null when the purchase is not captured (nothing opened) or the proof opened another
 * endpoint's pass (that one is not this endpoint's to show).
 */
export async function openPass(
  db: Db,
  p: { id: string; proofKey: string; endpointId: string; terms: PassTerms },
): Promise<PassRow | null> {
  const { calls, durationS } = p.terms
  // The duration runs from the purchase's capture, so a retried open does not lengthen it.
  await db`
    INSERT INTO passes (id, proof_key, call_id, endpoint_id, account_id, payer, price_atomic, calls_total,
                        uses_left, expires_at)
    SELECT ${p.id}, c.proof_key, k.id, k.endpoint_id, k.account_id, lower(call_payer(k.payer, k.payer_address)),
           k.amount_atomic, ${calls}::int, ${calls}::int,
           CASE WHEN ${durationS}::int IS NULL THEN 'infinity'::timestamptz
                ELSE k.created_at + make_interval(secs => ${durationS}::int) END
    FROM claims c JOIN calls k ON k.id = c.call_id
    WHERE c.proof_key = ${p.proofKey} AND c.status = 'captured'
      AND k.method = 'PASS' AND k.endpoint_id = ${p.endpointId}
    ON CONFLICT (proof_key) DO NOTHING`
  return findPurchasedPass(db, { proofKey: p.proofKey, endpointId: p.endpointId, payer: null })
}

/**
 * The pass a payment bought on this endpoint, for a purchase retried with it (read only). Not found: the
 * proof opened no pass, or another endpoint's, or (payer given) one of another payer.
 */
export async function findPurchasedPass(
  db: Db,
  q: { proofKey: string; endpointId: string; payer: string | null },
): Promise<PassRow | null> {
  const [row] = await db<PassRow[]>`
    SELECT ${db.unsafe(PASS_COLUMNS)} FROM passes
    WHERE proof_key = ${q.proofKey} AND endpoint_id = ${q.endpointId}
      AND (${q.payer}::text IS NULL OR payer = lower(${q.payer}::text))`
  return row ?? null
}

/**
 * replayed: this sign-in message (its nonce) was used before, on any instance: nothing drawn.
 * none: the wallet holds no pass with a use and time left on this endpoint (never bought, used up, expired).
 */
export type Draw =
  /** expiresMs: when the pass drawn on ends (epoch ms); null: a pass of calls only, never. */
  | { ok: true; passId: string; usesLeft: number | null; expiresMs: number | null }
  | { ok: false; reason: 'replayed' | 'none' }

export interface DrawRequest {
  endpointId: string
  /** Lower-case 0x address that signed in. */
  payer: string
  nonce: string
  /** Random, this request's own: tells its statement from another request's with the same nonce. */
  token: string
  nonceExpiresAt: Date
}

/**
 * drawPassUse: pass open → open, one use fewer. Precondition in its SQL: uses left (or a pass of time
 * only) and not expired, checked on the row as locked, so concurrent draws on any number of instances never
 * take more than the pass holds, and a draw that waited for another's last use takes the next pass. The
 * sign-in nonce is recorded in the same statement (a message is used once, drawn or not; a second insert of
 * it waits for the first to commit, then finds it), and the draw by its nonce (pass_draws).
 *
 * A live pass of time only is taken first, read without a lock and left unchanged: it has no uses to count,
 * so a draw on it is only its record. Locking and rewriting its row for every call serialized all of a
 * wallet's calls on that one row (one commit at a time) and left a dead row version per call. It also keeps
 * the uses of the wallet's counted passes for when no time pass covers the call.
 */
export async function drawPassUse(db: Db, q: DrawRequest): Promise<Draw> {
  const [row] = await db<
    { fresh: number; id: string | null; uses_left: number | null; expires_ms: number | null }[]
  >`
    WITH fresh AS (
      INSERT INTO sign_in_nonces (nonce, token, expires_at) VALUES (${q.nonce}, ${q.token}, ${q.nonceExpiresAt})
      ON CONFLICT (nonce) DO NOTHING
      RETURNING nonce
    ), timed AS (
      -- A pass of time only: nothing to draw from it, so neither locked nor written.
      SELECT id, uses_left, expires_at FROM passes
      WHERE endpoint_id = ${q.endpointId} AND payer = ${q.payer} AND uses_left IS NULL AND expires_at > now()
        AND EXISTS (SELECT 1 FROM fresh)
      ORDER BY expires_at DESC, id
      LIMIT 1
    ), pick AS (
      -- Locked as it is picked. Picked by a plain read, the pass whose last use a concurrent draw was
      -- taking (committed while the UPDATE below waited on it) kept its use in this statement's snapshot:
      -- the UPDATE then re-read it drawn out and drew nothing, and a wallet holding another pass with uses
      -- was refused, its sign-in message spent. Locking, a row that no longer qualifies once its lock is
      -- had is passed over and the next one taken (LIMIT reads above the lock).
      SELECT id FROM passes
      WHERE endpoint_id = ${q.endpointId} AND payer = ${q.payer}
        AND uses_left > 0 AND expires_at > now() AND NOT EXISTS (SELECT 1 FROM timed)
      ORDER BY expires_at, id
      LIMIT 1
      FOR NO KEY UPDATE
    ), counted AS (
      UPDATE passes SET uses_left = uses_left - 1
      FROM pick
      WHERE passes.id = pick.id AND EXISTS (SELECT 1 FROM fresh)
        AND uses_left > 0 AND expires_at > now()
      RETURNING passes.id, passes.uses_left, passes.expires_at
    ), drawn AS (
      SELECT * FROM timed UNION ALL SELECT * FROM counted
    ), recorded AS (
      INSERT INTO pass_draws (nonce, pass_id) SELECT ${q.nonce}, id FROM drawn
    )
    SELECT (SELECT count(*) FROM fresh)::int AS fresh, drawn.id, drawn.uses_left,
           CASE WHEN drawn.expires_at = 'infinity' THEN NULL
                ELSE floor(extract(epoch FROM drawn.expires_at) * 1000)::float8 END AS expires_ms
    FROM (SELECT 1) AS one LEFT JOIN drawn ON true`
  if (row === undefined || row.fresh === 0) return { ok: false, reason: 'replayed' }
  if (row.id === null) return { ok: false, reason: 'none' }
  return {
    ok: true,
    passId: row.id,
    usesLeft: row.uses_left,
    expiresMs: row.expires_ms === null ? null : Number(row.expires_ms),
  }
}

/** A grouped draw's answer: drawn from a pass of time, the message used before, or no such pass here. */
export type TimedDraw = Draw | { ok: false; reason: 'no_time_pass' }

/**
 * drawTimePassUses: pass open → open for the draws of a group whose wallet holds a live pass of time only on
 * the endpoint: each one's sign-in nonce recorded (a message is used once: the same nonce twice in a group
 * draws once, as two statements would) and its draw, in one statement for the group; the pass is read, not
 * locked or written, as drawPassUse reads it. A draw whose wallet has no such pass is left untouched, its
 * nonce not recorded (`no_time_pass`): drawPassUse takes it alone, a counted pass's use picked under its
 * lock (several draws on one counted pass in one statement would update its row once).
 */
export async function drawTimePassUses(db: Db, qs: readonly DrawRequest[]): Promise<TimedDraw[]> {
  const requests = qs.map((q, i) => ({
    i,
    endpoint_id: q.endpointId,
    payer: q.payer,
    nonce: q.nonce,
    token: q.token,
    expires_at: q.nonceExpiresAt.toISOString(),
  }))
  const rows = await db<{ i: number; id: string | null; fresh: boolean; expires_ms: number | null }[]>`
    WITH req AS MATERIALIZED (
      SELECT * FROM json_to_recordset(${JSON.stringify(requests)}::text::json)
        AS t(i int, endpoint_id text, payer text, nonce text, token text, expires_at timestamptz)
    ), timed AS MATERIALIZED (
      SELECT r.i, p.id, p.expires_at FROM req r
      CROSS JOIN LATERAL (
        SELECT id, expires_at FROM passes
        WHERE endpoint_id = r.endpoint_id AND payer = r.payer AND uses_left IS NULL AND expires_at > now()
        ORDER BY expires_at DESC, id
        LIMIT 1
      ) p
    ), fresh AS (
      -- In nonce order, as another instance's group would insert the same nonces: no deadlock between them.
      INSERT INTO sign_in_nonces (nonce, token, expires_at)
      SELECT r.nonce, r.token, r.expires_at FROM req r JOIN timed t ON t.i = r.i ORDER BY r.nonce
      ON CONFLICT (nonce) DO NOTHING
      RETURNING nonce, token
    ), recorded AS (
      INSERT INTO pass_draws (nonce, pass_id)
      SELECT f.nonce, t.id FROM fresh f JOIN req r ON r.nonce = f.nonce AND r.token = f.token
      JOIN timed t ON t.i = r.i
    )
    SELECT r.i, t.id, (f.nonce IS NOT NULL) AS fresh,
           CASE WHEN t.expires_at = 'infinity' THEN NULL
                ELSE floor(extract(epoch FROM t.expires_at) * 1000)::float8 END AS expires_ms
    FROM req r LEFT JOIN timed t ON t.i = r.i LEFT JOIN fresh f ON f.nonce = r.nonce AND f.token = r.token
    ORDER BY r.i`
  return rows.map((row): TimedDraw => {
    if (row.id === null) return { ok: false, reason: 'no_time_pass' }
    if (!row.fresh) return { ok: false, reason: 'replayed' }
    return {
      ok: true,
      passId: row.id,
      usesLeft: null,
      expiresMs: row.expires_ms === null ? null : Number(row.expires_ms),
    }
  })
}

/**
 * After a draw statement failed in flight: did this request's own statement commit (its token on the
 * nonce), and did it draw? absent: it did not, and now never will (the message is spent here first).
 *
 * The nonce is inserted before it is read, not just read: a statement whose client gave up on its answer
 * may still be running on the server and commit after a plain read found nothing, its use then drawn for
 * nobody and never given back. The insert waits for that statement's own insert of the nonce to commit or
 * roll back; the read after it, a statement of its own, sees the outcome.
 */
export async function findOwnDraw(
  db: Db,
  q: { nonce: string; token: string; nonceExpiresAt: Date },
): Promise<{ kind: 'absent' } | { kind: 'other' } | { kind: 'mine'; passId: string | null }> {
  // The fence's token is empty: a request's token is never (random hex), so no request takes it for its own.
  const fenced = await db`
    INSERT INTO sign_in_nonces (nonce, token, expires_at) VALUES (${q.nonce}, '', ${q.nonceExpiresAt})
    ON CONFLICT (nonce) DO NOTHING
    RETURNING 1`
  if (fenced.length > 0) return { kind: 'absent' }
  const [row] = await db<{ token: string; pass_id: string | null }[]>`
    SELECT n.token, d.pass_id FROM sign_in_nonces n LEFT JOIN pass_draws d ON d.nonce = n.nonce
    WHERE n.nonce = ${q.nonce}`
  // Gone between the two statements (pruned past its expiry): nothing of it is left to give back.
  if (row === undefined) return { kind: 'absent' }
  if (row.token !== q.token) return { kind: 'other' }
  return { kind: 'mine', passId: row.pass_id }
}

/**
 * giveBackPassUse: pass open → open, one use more, for a call the upstream certainly did not serve
 * (unreachable, 5xx) or that was never forwarded. Precondition in its SQL: the draw not given back yet
 * (once per draw) and the count below what was bought. A pass of time only has nothing to give back.
 */
export async function giveBackPassUse(db: Db, q: { nonce: string }): Promise<boolean> {
  const rows = await db`
    WITH back AS (
      UPDATE pass_draws SET given_back = true
      WHERE nonce = ${q.nonce} AND given_back = false
      RETURNING pass_id
    )
    UPDATE passes SET uses_left = uses_left + 1
    FROM back
    WHERE passes.id = back.pass_id AND uses_left < calls_total
    RETURNING passes.id`
  return rows.length === 1
}

/** A drawn use's served call, as its answer named it. */
export interface DrawServed {
  nonce: string
  receiptId: string
  upstreamStatus: number
  method: string
}

/**
 * recordPassDrawServed: pass open → open. A drawn use's call was served: its receipt (id, upstream status,
 * method, time) is written on the draw, once. No money moves (the purchase was the money) and the count does
 * not change. Precondition in its SQL: the draw not given back and no receipt written yet. Many draws in one
 * statement (the calls served since the last one): returns how many applied.
 */
export async function recordPassDrawServed(db: Db, served: readonly DrawServed[]): Promise<number> {
  if (served.length === 0) return 0
  const rows = await db`
    UPDATE pass_draws SET receipt_id = s.s_receipt, upstream_status = s.s_status, method = s.s_method,
                          served_at = now()
    FROM unnest(${served.map((x) => x.nonce)}::text[], ${served.map((x) => x.receiptId)}::text[],
                ${served.map((x) => x.upstreamStatus)}::int[], ${served.map((x) => x.method)}::text[])
      AS s(s_nonce, s_receipt, s_status, s_method)
    WHERE nonce = s.s_nonce AND given_back = false AND receipt_id IS NULL
    RETURNING 1`
  return rows.length
}
