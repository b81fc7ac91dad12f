// The last clean reconcile's high-water marks (one row per treasury + token), read by the next incremental run.
import type { Sql } from './sql.ts'

export interface ReconcileCheckpoint {
  name: string
  to_time: Date
  to_block: bigint
  ledger_entry_id: bigint
  payouts_confirmed_before: Date
  full_run: boolean
  ran_at: Date
}

export async function readCheckpoint(sql: Sql, name: string): Promise<ReconcileCheckpoint | null> {
  const [row] = await sql<ReconcileCheckpoint[]>`SELECT * FROM reconcile_checkpoints WHERE name = ${name}`
  return row ?? null
}

/** Only a clean run moves the checkpoint forward (never back: an older run finishing late changes nothing). */
export async function saveCheckpoint(sql: Sql, c: Omit<ReconcileCheckpoint, 'ran_at'>): Promise<void> {
  await sql`
    INSERT INTO reconcile_checkpoints (name, to_time, to_block, ledger_entry_id, payouts_confirmed_before,
                                       full_run)
    VALUES (${c.name}, ${c.to_time}, ${c.to_block.toString()}::bigint, ${c.ledger_entry_id.toString()}::bigint,
            ${c.payouts_confirmed_before}, ${c.full_run})
    ON CONFLICT (name) DO UPDATE SET to_time = EXCLUDED.to_time, to_block = EXCLUDED.to_block,
      ledger_entry_id = EXCLUDED.ledger_entry_id, payouts_confirmed_before = EXCLUDED.payouts_confirmed_before,
      full_run = EXCLUDED.full_run, ran_at = now()
    WHERE reconcile_checkpoints.to_time <= EXCLUDED.to_time`
}
