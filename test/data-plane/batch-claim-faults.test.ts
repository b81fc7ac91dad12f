// A channel claim transaction under a fault of the RPC: its broadcast reaches the node (and is mined) while
// the answer is lost. The claim is recorded before its broadcast, so the books still learn that it moved
// the money: every voucher settled once, the revenue booked once, reconcile clean. Real parts: the shared
// anvil with the channel contracts, the published batch-settlement client, a JSON-RPC proxy in front of the
// service only.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { chainClients, fundedAccount } from '../helpers/accounts.ts'
import { batchPayer } from '../helpers/batch-payer.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

const PRICE = 1000n
const CALLS = 3

let svc: TestService
let gate: RpcProxy
let upstream: Awaited<ReturnType<typeof startUpstream>>

beforeAll(async () => {
  gate = await startRpcProxy(chainClients().rpcUrl)
  // The claim job is run by hand, so each step is seen.
  svc = await startTestService({
    rpcUrl: gate.url,
    overrides: { x402: { batch_claim_interval_ms: 600_000 } } as never,
  })
  upstream = await startUpstream()
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await gate?.close()
})

describe('a channel claim whose broadcast answer was lost', () => {
  it('is found mined and booked once: vouchers settled, revenue booked, reconcile clean', async () => {
    const merchant = await registerMerchant(svc)
    const created = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.001, batch_settlement: true },
    })
    expect(created.status).toBe(201)
    const payer = await fundedAccount(100_000_000n)
    const caip2: `eip155:${number}` = `eip155:${await svc.chain.publicClient.getChainId()}`
    const { fetch: pay } = batchPayer(payer, { caip2, depositMultiplier: 10 })
    for (let i = 0; i < CALLS; i++) expect((await pay(created.body.metered_url)).status).toBe(200)
    await svc.flushCaptures()

    gate.loseBroadcastAnswers = true
    await svc.jobs.runNow('batch-claims').catch(() => {})
    gate.loseBroadcastAnswers = false
    await svc.jobs.runNow('batch-claims')
    await svc.jobs.runNow('batch-claims')

    const claims = await svc.sql<{ status: string; total_atomic: bigint }[]>`
      SELECT status, total_atomic FROM batch_claims`
    expect(claims).toEqual([{ status: 'done', total_atomic: BigInt(CALLS) * PRICE }])
    const [k] = await svc.sql<{ settled: number; unsettled: number }[]>`
      SELECT count(*) FILTER (WHERE settled_at IS NOT NULL)::int AS settled,
             count(*) FILTER (WHERE settled_at IS NULL)::int AS unsettled
      FROM claims WHERE kind = 'batch' AND status = 'captured'`
    expect(k).toEqual({ settled: CALLS, unsettled: 0 })
    const [booked] = await svc.sql<{ total: bigint }[]>`
      SELECT coalesce(sum(amount_atomic), 0)::bigint AS total FROM ledger_entries
      WHERE kind IN ('owner_share', 'fee')`
    expect(booked!.total).toBe(BigInt(CALLS) * PRICE)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  }, 120_000)
})
