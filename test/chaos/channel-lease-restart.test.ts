// A batch-settlement channel lease across a PostgreSQL restart (a private cluster, crashed for real): the
// lease runs out while the server is down, but no other instance takes it until the server has answered
// for a lease ttl, so its holder writes the calls it served meanwhile. Taken at once (as before), the holder's
// write was fenced and those calls were served unpaid: the chaos round of upto and channels
// (schemes-restart.test.ts) lost 3 to 6 calls a run that way. And a holder whose release of a channel
// failed with the connection accepts nothing on it until the release is written (it may have committed).
import { existsSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  requestChannelOp,
  takeChannelLease,
  type VoucherCall,
  writeChannelVouchers,
} from '../../src/books/channels.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { VoucherLeases } from '../../src/schemes/batch-settlement/leases.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'

const TTL_MS = 1_500
const PRICE = 1_000n
const CHANNEL = `0x${'c1'.repeat(32)}`
const PAYER = '0x2222222222222222222222222222222222222222'

describe.runIf(existsSync('/usr/lib/postgresql'))('channel lease across a PostgreSQL restart', () => {
  let cluster: PgCluster
  let sql: Sql

  beforeAll(async () => {
    cluster = await startPgCluster()
    sql = createSql(cluster.url, { max: 2 })
    await migrate(sql)
    await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
              VALUES ('acct_restart', '0x1111111111111111111111111111111111111111', 'R', 'test')`
    await requestChannelOp(sql, {
      id: 'dep_restart',
      channelId: CHANNEL,
      config: {},
      payer: PAYER,
      kind: 'deposit',
      amount: 10n * PRICE,
      calldata: '0x',
    })
    await sql`UPDATE batch_channel_ops SET status = 'done' WHERE id = 'dep_restart'`
    await sql`UPDATE batch_channels SET balance_atomic = ${10n * PRICE} WHERE channel_id = ${CHANNEL}`
  })
  afterAll(async () => {
    await sql?.end({ timeout: 1 })
    await cluster?.destroy()
  })

  const CALL: VoucherCall = {
    channelId: CHANNEL,
    cumulative: PRICE,
    endpointId: 'ep_restart',
    accountId: 'acct_restart',
    payer: PAYER,
    amountAtomic: PRICE,
    call: {
      callId: 'call_restart_1',
      ownerWallet: '0x1111111111111111111111111111111111111111',
      ownerShareAtomic: 950n,
      feeAtomic: 50n,
      upstreamStatus: 200,
      method: 'POST',
    },
  }

  const take = (holder: string) =>
    takeChannelLease(sql, { channelId: CHANNEL, holder, ttlMs: TTL_MS, reserve: 3n * PRICE })

  it('a lease that ran out while the server was down stays its holder’s for a ttl: its calls are written', async () => {
    const a = (await take('a'))!
    expect(a.won).toBe(true)
    // Down longer than the lease: it runs out before the server is back.
    await cluster.restart('immediate', TTL_MS + 200)
    const b = await waitFor(() => take('b').catch(() => null), {
      timeoutMs: 10_000,
      intervalMs: 50,
      what: 'the restarted server to answer',
    })
    const [row] = await sql<{ expired: boolean }[]>`
      SELECT lease_until < now() AS expired FROM batch_channels WHERE channel_id = ${CHANNEL}`
    expect(row!.expired).toBe(true)
    // Not taken: marked wanted, so that its holder lets it go once its calls are written.
    expect(b).toMatchObject({ won: false, lease_epoch: a.lease_epoch })
    const written = await writeChannelVouchers(sql, {
      holder: 'a',
      ttlMs: TTL_MS,
      reserve: 3n * PRICE,
      marks: [
        { channelId: CHANNEL, epoch: a.lease_epoch, cumulative: PRICE, signature: '0x', release: true },
      ],
      calls: [CALL],
    })
    expect(written.marked).toHaveLength(1)
    expect([...written.written]).toEqual([`batch:${CHANNEL}:${PRICE}`])
    // Let go with its calls written: the other instance takes it from the charged cumulative.
    const next = (await take('b'))!
    expect(next).toMatchObject({ won: true, lease_epoch: a.lease_epoch + 1n, charged_atomic: PRICE })
  })

  it('a lease whose release failed with the server accepts nothing until the release is written', async () => {
    const channelId = `0x${'c2'.repeat(32)}`
    await requestChannelOp(sql, {
      id: 'dep_release',
      channelId,
      config: {},
      payer: PAYER,
      kind: 'deposit',
      amount: 10n * PRICE,
      calldata: '0x',
    })
    await sql`UPDATE batch_channel_ops SET status = 'done' WHERE id = 'dep_release'`
    await sql`UPDATE batch_channels SET balance_atomic = ${10n * PRICE} WHERE channel_id = ${channelId}`
    const leases = new VoucherLeases(sql, {
      holder: 'h1',
      leaseMs: 5_000,
      flushMs: 5,
      reserveAtomic: 3n * PRICE,
      // Let go a second after its last call: by then the server below is down.
      idleMs: 1_000,
      handoffWaitMs: 7_500,
    })
    try {
      const voucher = (cumulative: bigint) => ({ channelId, cumulative, price: PRICE, signature: '0x01' })
      const first = await leases.accept(voucher(PRICE))
      if (!first.ok) throw new Error(`first voucher refused: ${first.reason}`)
      leases.served(first.lease, PRICE, {
        ...CALL,
        channelId,
        cumulative: PRICE,
        call: { ...CALL.call!, callId: 'call_rel_1' },
      })
      await leases.flushNow()
      // Idle, it is let go at the next flush: that write fails with the server (a commit whose answer is
      // lost the same way may have landed: the channel may be someone else's already).
      await cluster.stop('immediate')
      await new Promise((r) => setTimeout(r, 1_600))
      const during = await leases.accept(voucher(2n * PRICE))
      expect(during).toMatchObject({ ok: false, reason: 'busy' })
      await cluster.start()
      // The release is written as it was; then the channel is anyone's, from its charged cumulative.
      const next = await waitFor(
        async () => {
          const got = await takeChannelLease(sql, {
            channelId,
            holder: 'h2',
            ttlMs: TTL_MS,
            reserve: 3n * PRICE,
          }).catch(() => null)
          return got?.won ? got : null
        },
        { timeoutMs: 10_000, intervalMs: 100, what: 'the release to be written' },
      )
      expect(next.charged_atomic).toBe(PRICE)
    } finally {
      await leases.stop(1_000)
    }
  })

  it('a holder that never comes back loses the lease once the server has answered for a ttl', async () => {
    await cluster.restart('immediate', TTL_MS + 200)
    const refused = await waitFor(() => take('c').catch(() => null), {
      timeoutMs: 10_000,
      intervalMs: 50,
      what: 'the restarted server to answer',
    })
    expect(refused.won).toBe(false)
    const taken = await waitFor(async () => ((await take('c'))?.won ? true : null), {
      timeoutMs: TTL_MS + 3_000,
      intervalMs: 100,
      what: 'the lease to be taken a ttl after the restart',
    })
    expect(taken).toBe(true)
  })
})
