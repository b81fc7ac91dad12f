// Where each chain watcher stopped (watcher_cursors), so transfers sent while no instance ran are still seen
// after a restart.
import type { Sql, Tx } from './sql.ts'

/** The next block the treasury watcher should scan, as the last run left it (null: never ran). */
export async function loadWatcherCursor(db: Sql | Tx, name: string): Promise<bigint | null> {
  const [row] = await db<
    { next_block: bigint }[]
  >`SELECT next_block FROM watcher_cursors WHERE name = ${name}`
  return row?.next_block ?? null
}

/** Moves the cursor forward only: several instances' watchers may report the same ranges. */
export async function saveWatcherCursor(db: Sql | Tx, name: string, nextBlock: bigint): Promise<void> {
  await db`
    INSERT INTO watcher_cursors (name, next_block) VALUES (${name}, ${nextBlock})
    ON CONFLICT (name) DO UPDATE SET next_block = EXCLUDED.next_block, updated_at = now()
      WHERE watcher_cursors.next_block < EXCLUDED.next_block`
}
