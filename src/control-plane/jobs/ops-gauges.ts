// Operational gauges read at scrape time: backlogs, open payouts, what is owed and what the treasury
// holds. Read-only queries on shared state, so any instance (leader or not) can answer them; the alert rules
// in deploy/alerts.yml are written on these names.
import { readTreasuryFunds } from '../../chain/payouts.ts'
import {
  onScrape,
  payoutsOpenOldest,
  payoutsOwedAtomic,
  settlementBacklogCount,
  settlementBacklogOldest,
  treasuryGasWei,
  treasuryUsdcAtomic,
  webhookBacklogCount,
  webhookBacklogOldest,
  webhookOverdue,
} from '../../observability/metrics.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

interface BacklogRow {
  settle_n: number
  settle_oldest_s: number
  deliveries_n: number
  undispatched_n: number
  webhook_oldest_s: number
  webhook_overdue_s: number
  payouts_oldest_s: number
  owed_atomic: bigint
}

export function createOperationalGauges({ sql, chain }: JobDeps): BackgroundModule {
  const stopDatabase = onScrape(async () => {
    // One round trip; each part uses a partial index of its table (claims_to_settle is the nearest for the
    // first; deliveries by webhook_deliveries_due, events by events_undispatched; what is owed is the running
    // wallet balances, migration 0011).
    const [row] = await sql<BacklogRow[]>`
      WITH settle AS (
        SELECT count(*)::int AS n, min(captured_at) AS oldest FROM claims
        WHERE kind = 'eip3009' AND status = 'captured' AND settled_at IS NULL AND settlement_error IS NULL
      ), deliveries AS (
        SELECT count(*)::int AS n, min(e.created_at) AS oldest, min(d.next_attempt_at) AS next_due
        FROM webhook_deliveries d
          JOIN events e ON e.id = d.event_id
          JOIN webhooks w ON w.id = d.webhook_id
        -- A disabled or deleted webhook's deliveries stay pending and are never sent: not a backlog.
        WHERE d.status = 'pending' AND w.status = 'enabled' AND w.deleted_at IS NULL
      ), undispatched AS (
        SELECT count(*)::int AS n, min(created_at) AS oldest FROM events WHERE dispatched_at IS NULL
      ), open_payouts AS (
        SELECT min(created_at) AS oldest FROM payouts WHERE status IN ('pending', 'submitted')
      )
      SELECT
        settle.n AS settle_n,
        coalesce(extract(epoch FROM now() - settle.oldest), 0)::float8 AS settle_oldest_s,
        deliveries.n AS deliveries_n,
        undispatched.n AS undispatched_n,
        coalesce(extract(epoch FROM now() - least(deliveries.oldest, undispatched.oldest)), 0)::float8
          AS webhook_oldest_s,
        greatest(
          coalesce(extract(epoch FROM now() - deliveries.next_due), 0),
          coalesce(extract(epoch FROM now() - undispatched.oldest), 0),
          0)::float8 AS webhook_overdue_s,
        coalesce(extract(epoch FROM now() - open_payouts.oldest), 0)::float8 AS payouts_oldest_s,
        (SELECT coalesce(sum(unpaid_atomic), 0) FROM wallet_balances)::bigint
          AS owed_atomic
      FROM settle, deliveries, undispatched, open_payouts`
    if (!row) return
    settlementBacklogCount.set(row.settle_n)
    settlementBacklogOldest.set(row.settle_oldest_s)
    webhookBacklogCount.set(row.deliveries_n + row.undispatched_n)
    webhookBacklogOldest.set(row.webhook_oldest_s)
    webhookOverdue.set(row.webhook_overdue_s)
    payoutsOpenOldest.set(row.payouts_oldest_s)
    payoutsOwedAtomic.set(Number(row.owed_atomic))
  })
  const stopChain = onScrape(async () => {
    const funds = await readTreasuryFunds(chain.publicClient, {
      treasury: chain.treasury,
      usdc: chain.usdc.address,
    })
    treasuryUsdcAtomic.set(Number(funds.usdcAtomic))
    treasuryGasWei.set(Number(funds.wei))
  })
  return {
    jobs: [],
    async stop() {
      stopDatabase()
      stopChain()
    },
  }
}
