// A batch-settlement call in doubt (forwarded; the upstream's head did not come in time), with the published
// client unpatched. Its voucher is never served again, so its increment stays charged on the channel and the
// books carry it as a call with no upstream status; the client, which never saw that answer, is shown the
// channel, resyncs and pays on. Before, it sent the spent voucher forever (402 proof_already_used on every
// call), and the claim moved the payer's USDC for a call the books never saw (reconcile: inflow short).
import { createPublicClient, http } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { readChannel } from '../../src/chain/batch-channel.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { chainClients, fundedAccount } from '../helpers/accounts.ts'
import { batchPayer } from '../helpers/batch-payer.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

const PRICE = 1000n
let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>
const publicClient = createPublicClient({ transport: http(chainClients().rpcUrl) })

beforeAll(async () => {
  svc = await startTestService({ overrides: { proxy: { upstream_timeout_ms: 300 } } })
  upstream = await startUpstream()
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

describe('a channel call in doubt', () => {
  it('is charged and booked once with no status, never served again; the client pays on; books = chain', async () => {
    const owner = await registerMerchant(svc)
    const created = await svc.api('/api/v1/endpoints', {
      key: owner.key,
      body: { upstream_url: upstream.url, price: 0.001, batch_settlement: true },
    })
    expect(created.status).toBe(201)
    const id = (created.body as { id: string }).id
    const caip2 = `eip155:${await publicClient.getChainId()}` as const
    const who = await fundedAccount(100_000_000n)
    const { fetch: pay } = batchPayer(who, { caip2, depositMultiplier: 20 })
    const statuses: number[] = []
    for (const path of ['echo', 'echo', 'slow?ms=1500', 'echo', 'echo']) {
      const r = await pay(`${svc.url}/m/${id}/${path}`)
      statuses.push(r.status)
      await r.arrayBuffer()
    }
    expect(statuses).toEqual([200, 200, 504, 200, 200])
    // Forwarded once each: the call in doubt was not sent again by the calls after it.
    const forwarded = upstream.requests.map((r) => r.url.split('?')[0])
    expect(forwarded.filter((u) => u === '/slow')).toHaveLength(1)
    expect(forwarded.filter((u) => u === '/echo')).toHaveLength(4)

    await svc.flushCaptures()
    await svc.jobs.runNow('batch-claims')
    const calls = await svc.sql<{ amount_atomic: bigint; upstream_status: number }[]>`
      SELECT amount_atomic, upstream_status FROM calls WHERE endpoint_id = ${id} ORDER BY created_at`
    // Calls recorded in one group commit share created_at (now() is the transaction's start), so the one in
    // doubt may sort anywhere among them: what counts is one of each, not the order.
    expect(calls.map((c) => c.upstream_status).sort()).toEqual([0, 200, 200, 200, 200])
    expect(calls.every((c) => c.amount_atomic === PRICE)).toBe(true)
    const [channel] = await svc.sql<{ channel_id: `0x${string}`; charged_atomic: bigint }[]>`
      SELECT channel_id, charged_atomic FROM batch_channels WHERE payer = ${who.address}`
    expect(channel!.charged_atomic).toBe(5n * PRICE)
    expect((await readChannel(publicClient, channel!.channel_id)).totalClaimed).toBe(5n * PRICE)
    const [owed] = await svc.sql<{ owner: bigint }[]>`
      SELECT coalesce(sum(amount_atomic), 0)::bigint AS owner FROM ledger_entries
      WHERE kind = 'owner_share' AND account_id = ${(owner.account as { id: string }).id}`
    expect(owed!.owner).toBe((5n * PRICE * 95n) / 100n)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  }, 120_000)

  it('priced by usage: charged its whole ceiling, the calls around it their measured bytes; books = chain', async () => {
    const owner = await registerMerchant(svc)
    const created = await svc.api('/api/v1/endpoints', {
      key: owner.key,
      body: {
        upstream_url: upstream.url,
        batch_settlement: true,
        // $1 per MB: a call costs one base unit per byte of its answer, at most 10,000.
        pricing: { model: 'usage', unit: 'response_bytes', max_price: 0.01, price_per_mb: 1 },
      },
    })
    expect(created.status).toBe(201)
    const id = (created.body as { id: string }).id
    const caip2 = `eip155:${await publicClient.getChainId()}` as const
    const who = await fundedAccount(100_000_000n)
    const { fetch: pay } = batchPayer(who, { caip2, depositMultiplier: 20 })
    const sent = upstream.count()
    const statuses: number[] = []
    for (const path of ['echo', 'slow?ms=1500', 'echo', 'echo']) {
      const r = await pay(`${svc.url}/m/${id}/${path}`)
      statuses.push(r.status)
      await r.arrayBuffer()
    }
    expect(statuses).toEqual([200, 504, 200, 200])
    expect(upstream.count() - sent).toBe(4)

    await svc.flushCaptures()
    await svc.jobs.runNow('batch-claims')
    const calls = await svc.sql<{ amount_atomic: bigint; upstream_status: number }[]>`
      SELECT amount_atomic, upstream_status FROM calls WHERE endpoint_id = ${id} ORDER BY created_at`
    // In any order (see above): one in doubt, charged its whole ceiling.
    expect(calls.map((c) => c.upstream_status).sort()).toEqual([0, 200, 200, 200])
    expect(calls.find((c) => c.upstream_status === 0)!.amount_atomic).toBe(10_000n)
    const measured = calls.filter((c) => c.upstream_status === 200).map((c) => c.amount_atomic)
    expect(measured.every((a) => a > 0n && a < 10_000n)).toBe(true)
    const total = calls.reduce((s, c) => s + c.amount_atomic, 0n)
    const [channel] = await svc.sql<{ channel_id: `0x${string}`; charged_atomic: bigint }[]>`
      SELECT channel_id, charged_atomic FROM batch_channels WHERE payer = ${who.address}`
    expect(channel!.charged_atomic).toBe(total)
    expect((await readChannel(publicClient, channel!.channel_id)).totalClaimed).toBe(total)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  }, 120_000)
})
