// The stored retention horizons of claims (migration 0017): what the prune job announced, read by every
// verifier (cached, src/data-plane/proof-horizons.ts), and raised by the prune job only.
import type { Sql } from './sql.ts'

export type HorizonKind = 'tx' | 'eip3009'

/** Per kind, proofs dated before this (ms since the epoch) are refused; -Infinity: nothing pruned yet. */
export type RefusedBefore = Record<HorizonKind, number>

export async function loadRefusedBefore(sql: Sql): Promise<RefusedBefore> {
  const rows = await sql<{ kind: HorizonKind; ms: number }[]>`
    SELECT kind, (extract(epoch FROM refused_before) * 1000)::float8 AS ms FROM proof_horizons`
  const out: RefusedBefore = { tx: Number.NEGATIVE_INFINITY, eip3009: Number.NEGATIVE_INFINITY }
  for (const r of rows) out[r.kind] = r.ms
  return out
}

/**
 * One prune run's horizon for one kind. When the last announcement is at least `propagationMs` old (every
 * verifier has cached it since), it becomes what may be deleted below, and `cutoffMs` (if later) is
 * announced in its place; otherwise only the largest age used is recorded. With propagationMs 0 (one
 * process, tests) the new cutoff is prunable at once. Returns the cutoff deletes may use (null: nothing yet).
 */
export async function advanceHorizon(
  sql: Sql,
  q: { kind: HorizonKind; cutoffMs: number; ageMs: number; propagationMs: number },
): Promise<number | null> {
  const cutoff = new Date(q.cutoffMs)
  const now = q.propagationMs === 0
  // (SET expressions read the row as it was: `h.refused_before` is the previous announcement.)
  await sql`
    INSERT INTO proof_horizons AS h (kind, refused_before, prunable_before, announced_at, max_age_ms)
    VALUES (${q.kind}, ${cutoff}, ${now ? cutoff : new Date(0)}, now(), ${q.ageMs})
    ON CONFLICT (kind) DO UPDATE SET
      prunable_before = CASE
        WHEN h.announced_at > now() - ${q.propagationMs} * interval '1 millisecond' THEN h.prunable_before
        WHEN ${now} THEN greatest(h.refused_before, EXCLUDED.refused_before)
        ELSE h.refused_before END,
      refused_before = CASE
        WHEN h.announced_at > now() - ${q.propagationMs} * interval '1 millisecond' THEN h.refused_before
        ELSE greatest(h.refused_before, EXCLUDED.refused_before) END,
      announced_at = CASE
        WHEN h.announced_at > now() - ${q.propagationMs} * interval '1 millisecond' THEN h.announced_at
        WHEN EXCLUDED.refused_before > h.refused_before THEN now()
        ELSE h.announced_at END,
      -- Recorded on every run: the largest age any run used.
      max_age_ms = greatest(h.max_age_ms, EXCLUDED.max_age_ms)`
  const [current] = await sql<{ ms: number }[]>`
    SELECT (extract(epoch FROM prunable_before) * 1000)::float8 AS ms FROM proof_horizons WHERE kind = ${q.kind}`
  return current && current.ms > 0 ? current.ms : null
}

/**
 * How long an announced horizon waits before claims below it may be deleted: two refresh periods of the
 * verifiers' cached copies, and a second of margin.
 */
export function horizonPropagationMs(refreshMs: number): number {
  return 2 * refreshMs + 1_000
}
