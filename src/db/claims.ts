// Claims: the unique key that makes a proof pay once, on any instance. Claims are group-committed: the
// requests that arrive while a write is in flight share the next single INSERT.
import type { Sql } from './sql.ts'

export interface ClaimRequest {
  proofKey: string
  kind: 'tx' | 'eip3009'
  targetType: 'call' | 'payment'
  targetId: string
  accountId: string
  payer: string
  amountAtomic: bigint
  /** Until when an uncaptured claim may be retried on the same target. */
  retryWindowMs: number
  /** How long this request may hold the proof before another may retry it (crash safety). */
  leaseMs: number
  /** An EIP-3009 authorization to settle later (x402 payments); null for a transaction hash. */
  authorization: object | null
}

/**
 * won: this request holds the proof (a fresh claim, or a retry of an uncaptured one);
 * busy: another request is forwarding it right now (same target, lease held) — it may come free again;
 * used: it paid for something else, was captured, or its retry window is over — it never comes free.
 */
export type ClaimOutcome = 'won' | 'busy' | 'used'

interface Pending {
  req: ClaimRequest
  resolve(outcome: ClaimOutcome): void
  reject(err: unknown): void
}

export interface BatchWriterOptions {
  batchMax: number
  /** Round trips allowed in flight at once (≤ pool size). */
  concurrency: number
  onBatch?(size: number): void
}

/**
 * One INSERT … ON CONFLICT per batch. A conflicting row is taken over only when it is an uncaptured claim
 * on the same target, inside its retry window, and not leased by a live request: that is the retry path.
 */
export class ClaimWriter {
  private queue: Pending[] = []
  private inFlight = 0

  constructor(
    private readonly sql: Sql,
    private readonly options: BatchWriterOptions,
  ) {}

  claim(req: ClaimRequest): Promise<ClaimOutcome> {
    return new Promise((resolve, reject) => {
      this.queue.push({ req, resolve, reject })
      if (this.inFlight < this.options.concurrency) this.flush()
    })
  }

  private flush(): void {
    if (this.queue.length === 0) return
    const batch = this.queue.splice(0, this.options.batchMax)
    this.inFlight++
    this.options.onBatch?.(batch.length)
    this.write(batch).finally(() => {
      this.inFlight--
      if (this.queue.length > 0) this.flush()
    })
  }

  private async write(batch: Pending[]): Promise<void> {
    // The same proof twice in one statement would make ON CONFLICT touch a row twice: first one wins.
    const seen = new Set<string>()
    const rows: Pending[] = []
    for (const p of batch) {
      if (seen.has(p.req.proofKey)) p.resolve('busy')
      else {
        seen.add(p.req.proofKey)
        rows.push(p)
      }
    }
    if (rows.length === 0) return
    try {
      const won = await this.sql<{ proof_key: string }[]>`
        INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                            retry_until, lease_until, authorization_payload)
        SELECT k, kind, tt, tid, acct, payer, amt, 'claimed',
               now() + rw * interval '1 millisecond', now() + lease * interval '1 millisecond', auth::jsonb
        FROM unnest(${rows.map((p) => p.req.proofKey)}::text[], ${rows.map((p) => p.req.kind)}::text[],
                    ${rows.map((p) => p.req.targetType)}::text[], ${rows.map((p) => p.req.targetId)}::text[],
                    ${rows.map((p) => p.req.accountId)}::text[], ${rows.map((p) => p.req.payer)}::text[],
                    ${rows.map((p) => p.req.amountAtomic.toString())}::bigint[],
                    ${rows.map((p) => p.req.retryWindowMs)}::bigint[], ${rows.map((p) => p.req.leaseMs)}::bigint[],
                    ${rows.map((p) => (p.req.authorization ? JSON.stringify(p.req.authorization) : null))}::text[])
             AS t(k, kind, tt, tid, acct, payer, amt, rw, lease, auth)
        ON CONFLICT (proof_key) DO UPDATE
          SET lease_until = EXCLUDED.lease_until, attempts = claims.attempts + 1
          WHERE claims.status = 'claimed' AND claims.target_id = EXCLUDED.target_id
            AND claims.retry_until > now()
            AND (claims.lease_until IS NULL OR claims.lease_until < now())
        RETURNING proof_key`
      const winners = new Set(won.map((r) => r.proof_key))
      const losers = rows.filter((p) => !winners.has(p.req.proofKey))
      // Rare (replays and races): one more round trip to tell a proof in flight from a spent one.
      const busy = new Set<string>()
      if (losers.length > 0) {
        const found = await this.sql<{ proof_key: string }[]>`
          SELECT c.proof_key FROM claims c
          JOIN unnest(${losers.map((p) => p.req.proofKey)}::text[], ${losers.map((p) => p.req.targetId)}::text[])
            AS t(k, tid) ON c.proof_key = t.k
          WHERE c.status = 'claimed' AND c.target_id = t.tid AND c.retry_until > now()`
        for (const r of found) busy.add(r.proof_key)
      }
      for (const p of rows) {
        p.resolve(winners.has(p.req.proofKey) ? 'won' : busy.has(p.req.proofKey) ? 'busy' : 'used')
      }
    } catch (err) {
      for (const p of rows) p.reject(err)
    }
  }
}

/** The request that held the proof failed before capture: free it for a retry within its window. */
export async function releaseClaim(sql: Sql, proofKey: string): Promise<void> {
  await sql`UPDATE claims SET lease_until = NULL WHERE proof_key = ${proofKey} AND status = 'claimed'`
}

/** What is known about a proof that lost its claim (for the error message and the replay cache). */
export async function findClaim(
  sql: Sql,
  proofKey: string,
): Promise<{ status: string; target_id: string; retry_until: Date | null } | null> {
  const [row] = await sql<{ status: string; target_id: string; retry_until: Date | null }[]>`
    SELECT status, target_id, retry_until FROM claims WHERE proof_key = ${proofKey}`
  return row ?? null
}
