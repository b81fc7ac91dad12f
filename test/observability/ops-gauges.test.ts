// The operational gauges behind the alert rules report what the database and the chain hold, at scrape time.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService
beforeAll(async () => {
  // Jobs off: the dispatcher and the settlement batcher would otherwise work the rows off under the test.
  svc = await startTestService({ overrides: { jobs: { enabled: false } } })
})
afterAll(() => svc?.stop())

async function scrape(): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${svc.adminPort}/metrics`)).text()
  const values = new Map<string, number>()
  for (const m of text.matchAll(/^(tollgate_[a-z0-9_]+(?:\{[^}]*\})?) (\S+)$/gm))
    values.set(m[1]!, Number(m[2]))
  return values
}

describe('operational gauges', () => {
  it('are zero on an empty database, and readiness is reported per check', async () => {
    const m = await scrape()
    expect(m.get('tollgate_webhooks_backlog_count')).toBe(0)
    expect(m.get('tollgate_webhooks_overdue_seconds')).toBe(0)
    expect(m.get('tollgate_x402_settlement_backlog_count')).toBe(0)
    expect(m.get('tollgate_x402_settlement_backlog_oldest_seconds')).toBe(0)
    expect(m.get('tollgate_payouts_open_oldest_seconds')).toBe(0)
    expect(m.get('tollgate_payouts_owed_atomic')).toBe(0)
    expect(m.get('tollgate_readiness_check_ok{check="database"}')).toBe(1)
    expect(m.get('tollgate_readiness_check_ok{check="chain"}')).toBe(1)
    expect(m.get('tollgate_treasury_gas_wei')).toBeGreaterThan(0)
  })

  it('report an old undelivered event, an unsettled x402 call, an open payout and what is owed', async () => {
    const { sql } = svc
    await sql`INSERT INTO events (id, account_id, type, data, created_at)
      VALUES ('evt_ops_old', 'acct_ops', 'payment.received', '{}', now() - interval '1 hour')`
    await sql`INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic,
        status, claimed_at, captured_at, horizon_at)
      VALUES ('auth:ops', 'eip3009', 'call', 'call_ops', 'acct_ops', '0x0000000000000000000000000000000000000001',
        1000, 'captured', now() - interval '20 minutes', now() - interval '20 minutes', now())`
    await sql`INSERT INTO payouts (id, wallet, amount_atomic, status, created_at)
      VALUES ('po_ops', '0x0000000000000000000000000000000000000002', 5000, 'submitted', now() - interval '40 minutes')`
    await sql`INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
      VALUES ('acct_ops', 'owner_share', '0x0000000000000000000000000000000000000003', 9500, 'call', 'call_ops'),
             ('acct_ops', 'fee', NULL, 500, 'call', 'call_ops')`

    const m = await scrape()
    expect(m.get('tollgate_webhooks_backlog_count')).toBe(1)
    expect(m.get('tollgate_webhooks_backlog_oldest_seconds')).toBeGreaterThanOrEqual(3600)
    // Never fanned out for an hour: the dispatcher is that far behind.
    expect(m.get('tollgate_webhooks_overdue_seconds')).toBeGreaterThanOrEqual(3600)
    expect(m.get('tollgate_x402_settlement_backlog_count')).toBe(1)
    expect(m.get('tollgate_x402_settlement_backlog_oldest_seconds')).toBeGreaterThanOrEqual(1200)
    expect(m.get('tollgate_x402_settlement_backlog_oldest_seconds')).toBeLessThan(1300)
    expect(m.get('tollgate_payouts_open_oldest_seconds')).toBeGreaterThanOrEqual(2400)
    // The fee stays with the treasury: only the owner's share is owed.
    expect(m.get('tollgate_payouts_owed_atomic')).toBe(9500)

    // Settled: the x402 backlog empties; the payout confirmed: nothing open.
    await sql`UPDATE claims SET settled_at = now() WHERE proof_key = 'auth:ops'`
    await sql`UPDATE payouts SET status = 'confirmed', confirmed_at = now() WHERE id = 'po_ops'`
    const after = await scrape()
    expect(after.get('tollgate_x402_settlement_backlog_count')).toBe(0)
    expect(after.get('tollgate_payouts_open_oldest_seconds')).toBe(0)
  })
})
