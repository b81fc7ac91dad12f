// Channel leases of x402 batch-settlement, transition by transition: one holder at a
// time, the epoch fences a holder whose lease was taken over, nothing is written past the reservation or
// above the persisted voucher, a refund is not queued under a live lease, and the claim-expiry job leaves
// batch claims alone (a voucher's call is neither refunded nor voided: it is paid by the channel's claim).
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  claimableChannels,
  recordChannelClaims,
  requestRefundOp,
  settleCoveredChannelCalls,
  takeChannelLease,
  type VoucherCall,
  writeChannelVouchers,
} from '../../src/books/channels.ts'
import { expireUncapturedClaims } from '../../src/control-plane/jobs/claim-expiry.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { VoucherLeases } from '../../src/schemes/batch-settlement/leases.ts'
import { depositedChannel, servedCall } from '../helpers/channel-books.ts'
import { freshDatabaseUrl, migratedDatabase, usingServer } from '../helpers/database.ts'

let sql: Sql
let db: Awaited<ReturnType<typeof migratedDatabase>> | undefined
const ACCOUNT = 'acct_leases'
const PRICE = 1000n
const SIG = `0x${'ab'.repeat(65)}`

beforeAll(async () => {
  db = await migratedDatabase({ max: 3 })
  sql = db.sql
  await sql`INSERT INTO accounts (id, wallet_address, business_name, mode)
            VALUES (${ACCOUNT}, '0x1111111111111111111111111111111111111111', 'B', 'test')`
})
afterAll(async () => {
  await db?.stop()
})

let n = 0
/** A channel with `calls` calls' worth deposited and confirmed. */
async function channel(calls: bigint, db: Sql = sql): Promise<string> {
  return depositedChannel(db, `0x${(++n).toString(16).padStart(64, '0')}`, calls * PRICE)
}

/** A promise and the function that resolves it: one transaction holds until the test lets it go. */
function signal(): { done: Promise<void>; fire: () => void } {
  let fire!: () => void
  const done = new Promise<void>((r) => {
    fire = r
  })
  return { done, fire }
}

function served(channelId: string, calls: bigint): VoucherCall {
  return servedCall({ channelId, calls, price: PRICE, accountId: ACCOUNT })
}

const lease = (channelId: string, holder: string, ttlMs = 60_000) =>
  takeChannelLease(sql, { channelId, holder, ttlMs, reserve: 3n * PRICE })

describe('channel leases', () => {
  it('one holder at a time: another instance is refused and marks the channel wanted', async () => {
    const id = await channel(10n)
    const a = await lease(id, 'a')
    expect(a).toMatchObject({
      won: true,
      lease_epoch: 1n,
      charged_atomic: 0n,
      lease_ceiling_atomic: 3n * PRICE,
    })
    const b = await lease(id, 'b')
    expect(b!.won).toBe(false)
    const [row] = await sql<{ lease_holder: string; lease_wanted: boolean }[]>`
      SELECT lease_holder, lease_wanted FROM batch_channels WHERE channel_id = ${id}`
    expect(row).toEqual({ lease_holder: 'a', lease_wanted: true })
    expect(await lease('0xmissing', 'a')).toBeNull()
  })

  it('a write persists the highest voucher and the calls under it, never past the reservation, and slides the ceiling', async () => {
    const id = await channel(10n)
    const a = (await lease(id, 'a'))!
    const past = await writeChannelVouchers(sql, {
      holder: 'a',
      ttlMs: 60_000,
      reserve: 3n * PRICE,
      marks: [
        { channelId: id, epoch: a.lease_epoch, cumulative: 4n * PRICE, signature: SIG, release: false },
      ],
      calls: [served(id, 4n)],
    })
    // Past the ceiling granted (3 calls): neither the voucher nor its call is written.
    expect(past.marked).toEqual([])
    expect(past.written.size).toBe(0)
    const ok = await writeChannelVouchers(sql, {
      holder: 'a',
      ttlMs: 60_000,
      reserve: 3n * PRICE,
      marks: [
        { channelId: id, epoch: a.lease_epoch, cumulative: 2n * PRICE, signature: SIG, release: false },
      ],
      calls: [served(id, 1n), served(id, 2n), served(id, 3n)],
    })
    expect(ok.marked).toMatchObject([{ charged_atomic: 2n * PRICE, lease_ceiling_atomic: 5n * PRICE }])
    // The call at 3 is above the persisted voucher (2): not written.
    expect([...ok.written].sort()).toEqual([`batch:${id}:1000`, `batch:${id}:2000`])
  })

  it('the epoch fences a holder whose lease ran out and was taken over', async () => {
    const id = await channel(10n)
    const a = (await lease(id, 'a', 1))!
    await new Promise((r) => setTimeout(r, 20))
    // Instances share one ttl (x402.batch_lease_ms); b's is also how long the server must have been up.
    const b = (await lease(id, 'b', 1))!
    expect(b).toMatchObject({ won: true, lease_epoch: a.lease_epoch + 1n })
    const late = await writeChannelVouchers(sql, {
      holder: 'a',
      ttlMs: 60_000,
      reserve: 3n * PRICE,
      marks: [{ channelId: id, epoch: a.lease_epoch, cumulative: PRICE, signature: SIG, release: false }],
      calls: [served(id, 1n)],
    })
    expect(late.marked).toEqual([])
    expect(late.written.size).toBe(0)
    const [row] = await sql<{ charged_atomic: bigint; lease_holder: string }[]>`
      SELECT charged_atomic, lease_holder FROM batch_channels WHERE channel_id = ${id}`
    expect(row).toEqual({ charged_atomic: 0n, lease_holder: 'b' })
  })

  it('a released lease is free; a top voucher with no call row is open (its call may be retried)', async () => {
    const id = await channel(10n)
    const a = (await lease(id, 'a'))!
    await writeChannelVouchers(sql, {
      holder: 'a',
      ttlMs: 60_000,
      reserve: 3n * PRICE,
      marks: [{ channelId: id, epoch: a.lease_epoch, cumulative: 2n * PRICE, signature: SIG, release: true }],
      calls: [served(id, 1n)],
    })
    const b = (await lease(id, 'b'))!
    expect(b).toMatchObject({ won: true, charged_atomic: 2n * PRICE, top_open: true, signature: SIG })
  })

  it('a refund is not queued while an instance holds the channel, nor for another cumulative', async () => {
    const id = await channel(10n)
    await lease(id, 'a')
    expect(
      await requestRefundOp(sql, { id: `r1_${id}`, channelId: id, cumulative: 0n, amount: PRICE }),
    ).toBeNull()
    await sql`UPDATE batch_channels SET lease_holder = NULL, lease_until = NULL WHERE channel_id = ${id}`
    expect(
      await requestRefundOp(sql, { id: `r2_${id}`, channelId: id, cumulative: PRICE, amount: PRICE }),
    ).toBeNull()
    const op = await requestRefundOp(sql, { id: `r3_${id}`, channelId: id, cumulative: 0n, amount: PRICE })
    expect(op).toMatchObject({ kind: 'refund', status: 'pending', amount_atomic: PRICE })
    // An open refund keeps every instance from taking the channel.
    expect((await lease(id, 'b'))!.won).toBe(false)
  })

  it('the claim-expiry job neither refunds nor voids batch claims, served or in doubt', async () => {
    const id = await channel(10n)
    const a = (await lease(id, 'a'))!
    const doubt: VoucherCall = { ...served(id, 2n), call: null }
    await writeChannelVouchers(sql, {
      holder: 'a',
      ttlMs: 60_000,
      reserve: 3n * PRICE,
      marks: [
        { channelId: id, epoch: a.lease_epoch, cumulative: 2n * PRICE, signature: SIG, release: false },
      ],
      calls: [served(id, 1n), doubt],
    })
    // Both windows long past, as the expiry job would find them hours later.
    await sql`UPDATE claims SET retry_until = now() - interval '1 hour', lease_until = now() - interval '1 hour'
              WHERE proof_key LIKE ${`batch:${id}:%`}`
    await expireUncapturedClaims(sql)
    const rows = await sql<{ proof_key: string; status: string }[]>`
      SELECT proof_key, status FROM claims WHERE proof_key LIKE ${`batch:${id}:%`} ORDER BY proof_key`
    expect(rows).toEqual([
      { proof_key: `batch:${id}:1000`, status: 'captured' },
      { proof_key: `batch:${id}:2000`, status: 'claimed' },
    ])
    const [refunds] = await sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM ledger_entries WHERE kind = 'refund' AND source_id LIKE ${`batch:${id}:%`}`
    expect(refunds!.n).toBe(0)
  })
})

describe('a holder writing while a call is upstream', () => {
  // A holder killed after such a write and before its call's row landed left a voucher charged with no call:
  // the claim moved the payer's USDC for a call the books never saw (chain ≠ books by one price).
  it('persists no voucher above that call until its row is written with it; one call at a time', async () => {
    const id = await channel(10n)
    const sig = (k: bigint) => `0x${k.toString(16).padStart(130, '0')}`
    const leases = new VoucherLeases(sql, {
      holder: 'upstream-holder',
      leaseMs: 60_000,
      flushMs: 60_000,
      reserveAtomic: 5n * PRICE,
      idleMs: 60_000,
      handoffWaitMs: 0,
    })
    const persisted = async () =>
      (
        await sql<{ charged: bigint; signed: bigint; signature: string; calls: number }[]>`
          SELECT charged_atomic AS charged, signed_max_atomic AS signed, signature,
                 (SELECT count(*)::int FROM claims WHERE proof_key LIKE ${`batch:${id}:%`}) AS calls
          FROM batch_channels WHERE channel_id = ${id}`
      )[0]!
    const accept = (k: bigint) =>
      leases.accept({ channelId: id, cumulative: k * PRICE, price: PRICE, signature: sig(k) })
    const first = await accept(1n)
    if (!first.ok) throw new Error(first.reason)
    leases.served(first.lease, PRICE, served(id, 1n))
    const second = await accept(2n)
    if (!second.ok) throw new Error(second.reason)
    // Voucher 2's call is upstream: the next voucher waits (busy, as the reference server answers).
    expect(await accept(3n)).toMatchObject({ ok: false, reason: 'in_flight' })
    await leases.flushNow()
    // Marked at the cumulative voucher 2 was accepted on, under voucher 2's signature (it covers it).
    expect(await persisted()).toEqual({ charged: PRICE, signed: 2n * PRICE, signature: sig(2n), calls: 1 })
    leases.served(second.lease, 2n * PRICE, served(id, 2n))
    await leases.flushNow()
    expect(await persisted()).toEqual({
      charged: 2n * PRICE,
      signed: 2n * PRICE,
      signature: sig(2n),
      calls: 2,
    })
    const third = await accept(3n)
    if (!third.ok) throw new Error(third.reason)
    leases.served(third.lease, 3n * PRICE, served(id, 3n))
    await leases.stop(1_000)
    expect(await persisted()).toEqual({
      charged: 3n * PRICE,
      signed: 3n * PRICE,
      signature: sig(3n),
      calls: 3,
    })
    // What the next holder finds: every voucher under the charged cumulative has its call.
    const next = (await takeChannelLease(sql, { channelId: id, holder: 'next', ttlMs: 1, reserve: PRICE }))!
    expect(next).toMatchObject({ won: true, charged_atomic: 3n * PRICE, top_open: false })
  })
})

describe('a call written after the claim that covered it', () => {
  it('is settled by that claim and booked; a later claim does not take it', async () => {
    const id = await channel(10n)
    const a = (await lease(id, 'a'))!
    const write = (marks: number, calls: VoucherCall[]) =>
      writeChannelVouchers(sql, {
        holder: 'a',
        ttlMs: 60_000,
        reserve: 3n * PRICE,
        marks: marks
          ? [
              {
                channelId: id,
                epoch: a.lease_epoch,
                cumulative: BigInt(marks) * PRICE,
                signature: SIG,
                release: false,
              },
            ]
          : [],
        calls,
      })
    // c1 carries another channel's voucher first: this channel's is the second of two.
    const claim = async (claimId: string, block: bigint, others: string[] = []) => {
      const [due] = await claimableChannels(sql, { limit: 1, channelId: id })
      await recordChannelClaims(sql, {
        claimId,
        hash: `0x${claimId}`,
        block,
        entries: [
          ...others.map((channelId) => ({ channelId, totalClaimed: PRICE })),
          { channelId: id, totalClaimed: BigInt(due!.captured_max) },
        ],
      })
    }
    // Vouchers 1 and 2 accepted at once; call 2 answers first, is written and claimed (up to 2).
    await write(2, [served(id, 2n)])
    await claim('c1', 100n, ['0xnot-a-channel-of-this-test'])
    // Call 1 answers now: its USDC went with c1, and no claim is due for it (nothing above 2 is new).
    await write(0, [served(id, 1n)])
    expect(await claimableChannels(sql, { limit: 1, channelId: id })).toEqual([])
    // Call 3 is served and claimed by c2 meanwhile: c2 moved only what lay above 2.
    await write(3, [served(id, 3n)])
    await claim('c2', 101n)
    expect(await settleCoveredChannelCalls(sql, { limit: 100 })).toBe(1)
    // Each receipt's settlement: the claim transaction, its block, the channel's place among its vouchers
    // (the late call too: it was carried by c1).
    const rows = await sql<
      {
        cum: string
        settlement_tx: string | null
        block: string | null
        i: number | null
        n: number | null
        booked: number
      }[]
    >`
      SELECT split_part(k.proof_key, ':', 3) AS cum, k.settlement_tx, k.settlement_block::text AS block,
             k.settlement_index AS i, k.settlement_count AS n,
             (SELECT count(*)::int FROM ledger_entries e JOIN calls c ON e.source_type = 'settlement_batch'
                AND e.source_id = c.ledger_batch_id::text AND e.account_id = c.account_id
              WHERE call_proof_key(c.proof_key, c.proof) = k.proof_key) AS booked
      FROM claims k WHERE k.kind = 'batch' AND split_part(k.proof_key, ':', 2) = ${id}
      ORDER BY split_part(k.proof_key, ':', 3)::bigint`
    expect(rows).toEqual([
      { cum: `${PRICE}`, settlement_tx: '0xc1', block: '100', i: 1, n: 2, booked: 2 },
      { cum: `${2n * PRICE}`, settlement_tx: '0xc1', block: '100', i: 1, n: 2, booked: 2 },
      { cum: `${3n * PRICE}`, settlement_tx: '0xc2', block: '101', i: 0, n: 1, booked: 2 },
    ])
    // Once: nothing is left for a second run.
    expect(await settleCoveredChannelCalls(sql, { limit: 100 })).toBe(0)
  })
})

describe.runIf(usingServer)('recording a claim', () => {
  it('settles and books its calls before it locks its channels: voucher writes and leases are not held', async () => {
    const id = await channel(10n)
    const a = (await lease(id, 'a'))!
    await writeChannelVouchers(sql, {
      holder: 'a',
      ttlMs: 60_000,
      reserve: 3n * PRICE,
      marks: [
        { channelId: id, epoch: a.lease_epoch, cumulative: 3n * PRICE, signature: SIG, release: false },
      ],
      calls: [served(id, 1n), served(id, 2n), served(id, 3n)],
    })
    // The channel's row held by another transaction (a voucher write or a lease take in flight).
    const held = signal()
    const locked = signal()
    const holding = sql.begin(async (tx) => {
      await tx`SELECT 1 FROM batch_channels WHERE channel_id = ${id} FOR UPDATE`
      locked.fire()
      await held.done
    })
    await locked.done
    const recording = recordChannelClaims(sql, {
      claimId: 'c_unheld',
      hash: '0xc_unheld',
      block: 200n,
      entries: [{ channelId: id, totalClaimed: 3n * PRICE }],
    })
    // The recording waits on the channel's row only once its calls are settled and their revenue booked:
    // its backend then holds the ledger's row-exclusive lock (it locked the channel first before, and
    // waited there with nothing booked).
    let booked = 0
    for (let i = 0; i < 300 && booked === 0; i++) {
      const [w] = await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM pg_locks waiting
        JOIN pg_locks l ON l.pid = waiting.pid AND l.granted AND l.mode = 'RowExclusiveLock'
        JOIN pg_class c ON c.oid = l.relation AND c.relname LIKE 'ledger_entries%'
        WHERE NOT waiting.granted`
      booked = w!.n
      if (booked === 0) await new Promise((r) => setTimeout(r, 10))
    }
    held.fire()
    await holding
    expect(await recording).toBe(3)
    expect(booked).toBeGreaterThan(0)
    const [row] = await sql<{ claimed_atomic: bigint }[]>`
      SELECT claimed_atomic FROM batch_channels WHERE channel_id = ${id}`
    expect(row!.claimed_atomic).toBe(3n * PRICE)
  })
})

describe.runIf(usingServer)('booking a large claim', () => {
  it('reads each call once, whatever the statistics said when the tables were small', async () => {
    // One connection: its statistics counts are the ones read back.
    const one = createSql((await freshDatabaseUrl())!, { max: 1 })
    try {
      await migrate(one)
      await one`INSERT INTO accounts (id, wallet_address, business_name, mode)
                VALUES (${ACCOUNT}, '0x1111111111111111111111111111111111111111', 'B', 'test')`
      const calls = 6_050n
      const id = await channel(calls, one)
      const a = (await takeChannelLease(one, {
        channelId: id,
        holder: 'a',
        ttlMs: 60_000,
        reserve: calls * PRICE,
      }))!
      const write = (from: number, to: number) =>
        writeChannelVouchers(one, {
          holder: 'a',
          ttlMs: 60_000,
          reserve: calls * PRICE,
          marks: [
            {
              channelId: id,
              epoch: a.lease_epoch,
              cumulative: BigInt(to) * PRICE,
              signature: SIG,
              release: false,
            },
          ],
          calls: Array.from({ length: to - from }, (_, i) => served(id, BigInt(from + i + 1))),
        })
      // Statistics taken at 50 calls, then 6,000 more: the account's calls estimated at a handful. Six small
      // claims booked meanwhile: enough executions for the connection to keep a generic plan made then.
      await write(0, 50)
      await one`ANALYZE`
      for (let k = 1; k <= 6; k++) {
        const small = await recordChannelClaims(one, {
          claimId: `c_small_${k}`,
          hash: `0xc_small_${k}`,
          block: BigInt(300 + k),
          entries: [{ channelId: id, totalClaimed: BigInt(5 * k) * PRICE }],
        })
        expect(small).toBe(5)
      }
      for (let from = 50; from < Number(calls); from += 1_000) await write(from, from + 1_000)
      const callsRead = async () => {
        // This backend's counts are reported at the end of its next transaction.
        await one`SELECT pg_stat_force_next_flush()`
        const [row] = await one<{ n: string }[]>`
          SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::text AS n
          FROM pg_stat_user_tables WHERE relname LIKE 'calls%'`
        return Number(row!.n)
      }
      const before = await callsRead()
      const booked = await recordChannelClaims(one, {
        claimId: 'c_large',
        hash: '0xc_large',
        block: 400n,
        entries: [{ channelId: id, totalClaimed: calls * PRICE }],
      })
      const read = (await callsRead()) - before
      expect(booked).toBe(Number(calls) - 30)
      // Each call is read by its look-up and by its update; the planner may read a month this small whole
      // for an update of 2,000 of its calls instead (cheaper than 2,000 probes): ~3 reads a call here. The
      // plan of a join walked all of the account's calls for each key: ~calls² reads.
      expect(read).toBeLessThan(4 * Number(calls))
    } finally {
      await one.end()
    }
  })
})

describe.runIf(usingServer)('a lease taken while the last holder lets go', () => {
  it("sees the call that holder's release wrote: its voucher is not open to be served again", async () => {
    const id = await channel(10n)
    const a = (await lease(id, 'a'))!
    // a's release, with the call its voucher paid, committed only once b's take waits on the row.
    const held = signal()
    const written = signal()
    const releasing = sql.begin(async (tx) => {
      await writeChannelVouchers(tx as unknown as Sql, {
        holder: 'a',
        ttlMs: 60_000,
        reserve: 3n * PRICE,
        marks: [{ channelId: id, epoch: a.lease_epoch, cumulative: PRICE, signature: SIG, release: true }],
        calls: [served(id, 1n)],
      })
      written.fire()
      await held.done
    })
    await written.done
    const taking = lease(id, 'b')
    for (let i = 0; i < 200; i++) {
      const [w] = await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`
      if (w!.n > 0) break
      await new Promise((r) => setTimeout(r, 10))
    }
    held.fire()
    await releasing
    // b's statement read the row as a left it (charged 1 call); the call row a wrote beside it must count.
    expect(await taking).toMatchObject({ won: true, charged_atomic: PRICE, top_open: false })
  })

  it('a lease asked for while a refund is being queued is not granted', async () => {
    const id = await channel(10n)
    const held = signal()
    const queued = signal()
    const refunding = sql.begin(async (tx) => {
      const op = await requestRefundOp(tx as unknown as Sql, {
        id: `ref_${id}`,
        channelId: id,
        cumulative: 0n,
        amount: 10n * PRICE,
      })
      expect(op).not.toBeNull()
      queued.fire()
      await held.done
    })
    await queued.done
    const taking = lease(id, 'b')
    await new Promise((r) => setTimeout(r, 100))
    held.fire()
    await refunding
    expect(await taking).toMatchObject({ won: false })
    const [c] = await sql<{ lease_holder: string | null }[]>`
      SELECT lease_holder FROM batch_channels WHERE channel_id = ${id}`
    expect(c!.lease_holder).toBeNull()
  })
})

describe.runIf(usingServer)('the claim job on a channel with nothing new to claim', () => {
  it('reads none of the settled calls under its claimed total', async () => {
    // One connection: its index statistics are flushed on request and read back on it.
    const one = createSql((await freshDatabaseUrl())!, { max: 1 })
    try {
      await one`INSERT INTO accounts (id, wallet_address, business_name, mode)
                VALUES (${ACCOUNT}, '0x1111111111111111111111111111111111111111', 'B', 'test')`
      const calls = 400n
      const id = await channel(calls + 10n, one)
      const a = (await takeChannelLease(one, {
        channelId: id,
        holder: 'a',
        ttlMs: 60_000,
        reserve: calls * PRICE,
      }))!
      const mark = (upTo: bigint) => ({
        channelId: id,
        epoch: a.lease_epoch,
        cumulative: upTo * PRICE,
        signature: SIG,
        release: false,
      })
      const served400 = Array.from({ length: Number(calls) }, (_, i) => served(id, BigInt(i + 1)))
      await writeChannelVouchers(one, {
        holder: 'a',
        ttlMs: 60_000,
        reserve: calls * PRICE,
        marks: [mark(calls)],
        calls: served400,
      })
      // Claimed and settled: each settled call leaves its entry in the unsettled index until a vacuum.
      await recordChannelClaims(one, {
        claimId: 'c1',
        hash: '0xc1',
        block: 1n,
        entries: [{ channelId: id, totalClaimed: calls * PRICE }],
      })
      // A voucher above it accepted, its call not served yet: the channel is charged past its claim.
      await writeChannelVouchers(one, {
        holder: 'a',
        ttlMs: 60_000,
        reserve: calls * PRICE,
        marks: [mark(calls + 1n)],
        calls: [],
      })
      const entriesRead = async () => {
        await one`SELECT pg_stat_force_next_flush()`
        await one`SELECT pg_stat_clear_snapshot()`
        const [r] = await one<{ n: bigint }[]>`
          SELECT coalesce(sum(idx_tup_read), 0)::bigint AS n FROM pg_stat_user_indexes
          WHERE indexrelname LIKE 'claims%batch%' OR indexrelname LIKE 'claims%split_part%'`
        return r!.n
      }
      const before = await entriesRead()
      expect(await claimableChannels(one, { limit: 10, channelId: id })).toEqual([])
      expect(await entriesRead()).toBe(before)
    } finally {
      await one.end()
    }
  })
})
