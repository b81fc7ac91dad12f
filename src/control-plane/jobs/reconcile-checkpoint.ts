// Reconcile from a stored checkpoint: a run checks what is new since the last clean run (claims, calls and
// payouts from its end less a look-back, the chain from the matching block, and the running balances of the
// accounts touched since, as their snapshot plus what their entries added), and a clean run moves the
// checkpoint and rolls the snapshots forward. `full` checks everything from genesis and, when clean, sets
// the checkpoint and recomputes every snapshot. Without a checkpoint the first run is full.
import { readCheckpoint, saveCheckpoint } from '../../db/reconcile-checkpoints.ts'
import { type ReconcileDeps, type ReconcileReport, reconcile } from './reconcile.ts'
import { checkBalancesSince, marksBehindNow, resetSnapshots } from './reconcile-balances.ts'

export async function reconcileFromCheckpoint(
  deps: ReconcileDeps,
  options: {
    full: boolean /** See marksBehindNow; tests that write and check at once pass 0. */
    commitLagMs?: number
  },
): Promise<ReconcileReport> {
  const { sql, chain, config } = deps
  const name = `${chain.treasury.toLowerCase()}:${chain.usdc.address.toLowerCase()}`
  // Marks taken before the run: whatever commits during it is new to the next run.
  const startedMs = Date.now()
  const marks = await marksBehindNow(sql, options.commitLagMs)
  const previous = options.full ? null : await readCheckpoint(sql, name)
  const fromMs = previous ? previous.to_time.getTime() - config.payouts.reconcile_lookback_ms : null
  const report = await reconcile(deps, { fromMs, toMs: null, balances: previous ? false : null })
  let saveSnapshots = () => resetSnapshots(sql, marks)
  if (previous) {
    const since = await checkBalancesSince(
      sql,
      { entryId: previous.ledger_entry_id, confirmedBefore: previous.payouts_confirmed_before },
      marks,
    )
    report.balances = since.check
    report.differences.push(...since.check.differences)
    report.ok = report.differences.length === 0
    saveSnapshots = since.save
  }
  if (report.ok) {
    await saveSnapshots()
    await saveCheckpoint(sql, {
      name,
      to_time: new Date(startedMs),
      to_block: BigInt(report.range.to_block),
      ledger_entry_id: marks.entryId,
      payouts_confirmed_before: marks.confirmedBefore,
      full_run: previous === null,
    })
  }
  return {
    ...report,
    checkpoint: {
      mode: previous ? 'incremental' : 'full',
      since: fromMs === null ? null : new Date(fromMs).toISOString(),
      saved: report.ok,
    },
  }
}
