// The once-only table for signature nonces (migration 0068): the primary key is the whole replay check, so
// two instances racing on one replayed signature cannot both accept it.
import type { Sql } from './sql.ts'

export interface NonceClaim {
  key: string
  expiresAtMs: number
}

/**
 * Records the nonce; true when it was free (first use, or its earlier row has expired). A few expired rows
 * are removed on the way, so the table stays the size of the signature window.
 */
export async function claimNonce(sql: Sql, q: NonceClaim): Promise<boolean> {
  return (await claimNonces(sql, [q])).has(q.key)
}

/** One statement for many distinct keys: the set of those that were free. */
async function claimNonces(sql: Sql, claims: readonly NonceClaim[]): Promise<Set<string>> {
  const keys = claims.map((c) => c.key)
  const expiries = claims.map((c) => new Date(c.expiresAtMs).toISOString())
  const prune = Math.min(1_000, 16 * claims.length)
  const rows = await sql<Array<{ nonce_key: string }>>`
    WITH pruned AS (
      DELETE FROM identity_nonces WHERE nonce_key IN (
        SELECT nonce_key FROM identity_nonces
        WHERE expires_at < now() AND nonce_key <> ALL(${keys}::text[]) LIMIT ${prune})
    )
    INSERT INTO identity_nonces (nonce_key, expires_at)
    SELECT * FROM unnest(${keys}::text[], ${expiries}::timestamptz[])
    ON CONFLICT (nonce_key) DO UPDATE SET expires_at = EXCLUDED.expires_at
      WHERE identity_nonces.expires_at < now()
    RETURNING nonce_key`
  return new Set(rows.map((r) => r.nonce_key))
}

/**
 * Nonce claims of one instance, grouped: a key this instance already holds is refused at once (no query),
 * and the rest go to the database together, one statement per batch, one batch in flight at a time (those
 * that arrive meanwhile wait for the next). The database stays the judge across instances; the memory is
 * only a first check, bounded, and forgetting it (a restart, the bound) costs a query, never a replay.
 */
export class NonceClaims {
  readonly #held = new Map<string, number>()
  #pending: Array<{ claim: NonceClaim; done: (fresh: boolean) => void; failed: (err: unknown) => void }> = []
  #inFlight = false

  constructor(
    private readonly sql: Sql,
    private readonly opts: { maxBatch: number; maxHeld: number } = { maxBatch: 256, maxHeld: 100_000 },
  ) {}

  claim(q: NonceClaim): Promise<boolean> {
    const now = Date.now()
    const heldUntil = this.#held.get(q.key)
    if (heldUntil !== undefined && heldUntil > now) return Promise.resolve(false)
    this.#hold(q, now)
    return new Promise((done, failed) => {
      this.#pending.push({ claim: q, done, failed })
      if (!this.#inFlight) this.#flush()
    })
  }

  #hold(q: NonceClaim, now: number): void {
    if (this.#held.size >= this.opts.maxHeld) {
      for (const [k, until] of this.#held) if (until <= now) this.#held.delete(k)
      // Still full of live keys: drop the oldest half (the database still refuses their replays).
      if (this.#held.size >= this.opts.maxHeld) {
        let drop = this.#held.size >> 1
        for (const k of this.#held.keys()) {
          if (drop-- <= 0) break
          this.#held.delete(k)
        }
      }
    }
    this.#held.set(q.key, q.expiresAtMs)
  }

  #flush(): void {
    const batch = this.#pending.splice(0, this.opts.maxBatch)
    if (batch.length === 0) return
    this.#inFlight = true
    claimNonces(
      this.sql,
      batch.map((b) => b.claim),
    ).then(
      (fresh) => {
        for (const b of batch) b.done(fresh.has(b.claim.key))
        this.#next()
      },
      (err) => {
        // Not known to be recorded: forget them here, so a retry asks the database again.
        for (const b of batch) {
          this.#held.delete(b.claim.key)
          b.failed(err)
        }
        this.#next()
      },
    )
  }

  #next(): void {
    this.#inFlight = false
    this.#flush()
  }
}
