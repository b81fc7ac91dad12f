// A first page of payouts in both databases before GET /payouts is timed: the empty database's own run makes
// none (its paid calls are never paid out), so without this it would answer an empty list against the
// history's full page, and the ratio would time JSON for 100 payouts, not the read's growth with history.
// Recorded and failed through the books (src/books/payouts.ts) under a treasury nobody sends from: failed
// payouts stay listed (their payout_accounts rows are kept) and their entries are payable again, so the
// batcher's measurement after this finds the same entries it would have.
import { failPayout, recordPayouts } from '../../src/books/payouts.ts'
import type { Sql } from '../../src/db/sql.ts'

/** The treasury of these payouts: no key, never broadcast; its nonces are its own. */
const NOBODY = '0x000000000000000000000000000000000000dEaD'

/** Records and fails `count` payouts of `entriesEach` of the oldest payable entries each; returns how many. */
export async function recordFailedPayouts(
  sql: Sql,
  o: { count: number; entriesEach: number },
): Promise<number> {
  let made = 0
  for (let n = 0; n < o.count; n++) {
    const recorded = await recordPayouts(sql, {
      treasury: NOBODY,
      firstNonce: n,
      minAtomic: 1n,
      maxWallets: 1,
      maxEntries: o.entriesEach,
      afford: () => null,
      sign: async ({ nonce }) => ({ rawTx: '0x', hash: `0x${nonce.toString(16).padStart(64, 'd')}` }),
    })
    if (!recorded.ok || recorded.payouts.length === 0) break
    for (const p of recorded.payouts) {
      // retry_at already past: the wallet is not held back, the next round can take the same entries.
      const failed = await failPayout(sql, {
        id: p.id,
        error: 'bench',
        retryAt: new Date(Date.now() - 1_000),
      })
      if (!failed.ok) throw new Error(`bench payout ${p.id} not failed: ${failed.reason}`)
      made++
    }
  }
  return made
}
