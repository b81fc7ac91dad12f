// Passes across a PostgreSQL crash: a private cluster, anvil, an upstream that counts what it serves, and
// two tollgate server processes on one database. Three buyers each buy a pass of N calls (by transaction
// hash), then sign in (the published wrapFetchWithSIWx, unchanged) from concurrent clients spread over
// both instances, retrying 503s and network errors, while PostgreSQL is crash-restarted twice
// (`pg_ctl -m immediate`). Afterwards each buyer calls until refused: the upstream must have served each
// pass exactly N times (never more: a use is drawn once; never fewer: a draw lost with its answer is
// given back), the books must say the same, and `npm run reconcile` must exit 0.
import { existsSync } from 'node:fs'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { wrapFetchWithSIWx } from '@x402/extensions/sign-in-with-x'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeProofs } from '../../bench/proofs.ts'
import { type DevChain, startDevChain } from '../../src/chain/dev-chain.ts'
import { createSql } from '../../src/db/sql.ts'
import type { ChildService } from '../helpers/child-service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { type CountingUpstream, startCountingUpstream } from './counting-upstream.ts'
import { merchantEndpoint, runReconcile, startChildOn } from './harness.ts'
import { type PgCluster, startPgCluster } from './pg-cluster.ts'

const N = 20
const BUYERS = 3
const CLIENTS_PER_BUYER = 4
const PASS_PRICE_ATOMIC = 10_000n
/** Calls on the pass of time (the buyer after the counted ones), whose draws go in groups. */
const TIMED_CALLS = 40
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const log = (line: string) => process.stderr.write(`[pass-restart] ${line}\n`)

describe.runIf(existsSync('/usr/lib/postgresql'))('passes across a PostgreSQL crash-restart', () => {
  let cluster: PgCluster
  let chain: DevChain
  let upstream: CountingUpstream
  const instances: ChildService[] = []

  beforeAll(async () => {
    cluster = await startPgCluster()
    chain = await startDevChain({ payers: BUYERS + 1, payerFunding: 1_000_000n, treasuryFunding: 1_000_000n })
    upstream = await startCountingUpstream()
    for (let i = 0; i < 2; i++) {
      instances.push(
        await startChildOn(cluster, chain, {
          proxy: { allow_private_upstreams: true },
          log: { level: 'warn' },
        }),
      )
    }
  })
  afterAll(async () => {
    for (const i of instances) await i.kill('SIGTERM').catch(() => {})
    await upstream?.close()
    await chain?.stop()
    await cluster?.destroy()
  })

  it('serves every pass exactly N times through two crash-restarts, and reconcile is clean', async () => {
    const started = Date.now()
    const [a, b] = instances as [ChildService, ChildService]
    const { ep: endpoint } = await merchantEndpoint(a.url, 'Pass Chaos Co', {
      upstream_url: `${upstream.url}/work`,
      price: 0.001,
      pass: { price: 0.01, calls: N },
    })
    const id = endpoint.id as string
    expect(id, JSON.stringify(endpoint)).toBeTruthy()
    // A pass of time only on another endpoint: its draws share a statement per group (drawTimePassUses).
    const { ep: timedEndpoint } = await merchantEndpoint(a.url, 'Pass Time Chaos Co', {
      upstream_url: `${upstream.url}/work`,
      price: 0.001,
      pass: { price: 0.01, duration_s: 3600 },
    })
    const tid = timedEndpoint.id as string
    expect(tid, JSON.stringify(timedEndpoint)).toBeTruthy()

    // Each buyer pays the pass price by a USDC transfer and presents its hash at /pass/<id>.
    for (let i = 0; i <= BUYERS; i++) {
      const [hash] = await makeProofs({
        rpcUrl: chain.rpcUrl,
        chainId: chain.chainId,
        usdc: chain.usdcAddress,
        payerKey: chain.payers[i]!.privateKey,
        treasury: chain.treasury.address,
        value: PASS_PRICE_ATOMIC,
        count: 1,
      })
      const r = await fetch(`${(i % 2 ? b : a).url}/pass/${i < BUYERS ? id : tid}`, {
        method: 'POST',
        headers: { 'x-payment': hash! },
      })
      expect(r.status, await r.clone().text()).toBe(201)
    }
    log(`passes bought in ${Date.now() - started} ms`)

    const counts = { ok: 0, timed: 0, s503: 0, network: 0, refused: 0, other: 0 }
    /** Calls as buyer `i` until its pass is refused (no_live_pass); 503s and network errors are retried. */
    /** The pass of time's buyer (i = BUYERS) calls until TIMED_CALLS were answered 200 between its clients. */
    const drain = async (i: number, worker: number, deadlineMs: number) => {
      const signer = privateKeyToAccount(chain.payers[i]!.privateKey)
      const siwxFetch = wrapFetchWithSIWx(fetch, signer)
      const timed = i === BUYERS
      for (let n = 0; Date.now() < deadlineMs; n++) {
        if (timed && counts.timed >= TIMED_CALLS) return
        const base = (worker + n) % 2 ? b.url : a.url
        const url = timed ? `${base}/m/${tid}?p=timed` : `${base}/m/${id}?p=buyer${i}`
        let r: Response
        try {
          r = await siwxFetch(url, { signal: AbortSignal.timeout(15_000) })
        } catch {
          counts.network++
          await sleep(200)
          continue
        }
        await r.arrayBuffer()
        if (r.status === 200) counts[timed ? 'timed' : 'ok']++
        else if (r.status === 503) {
          counts.s503++
          await sleep(200)
        } else if (r.status === 402) {
          const reason = decodePaymentRequiredHeader(r.headers.get('payment-required')!).error
          if (reason === 'no_live_pass') {
            counts.refused++
            return
          }
          counts.other++
        } else {
          counts.other++
          await sleep(200)
        }
      }
    }

    const load = Promise.all(
      Array.from({ length: (BUYERS + 1) * CLIENTS_PER_BUYER }, (_, k) =>
        drain(k % (BUYERS + 1), k, Date.now() + 60_000),
      ),
    )
    // Two crash-restarts while the buyers are calling.
    await sleep(300)
    for (let round = 0; round < 2; round++) {
      const at = Date.now()
      await cluster.restart('immediate', 500)
      log(
        `crash-restart ${round + 1}: down and up again in ${Date.now() - at} ms; served so far ${counts.ok}`,
      )
      await sleep(700)
    }
    await load
    // Uses whose draw was lost with its answer come back once the database answers; then call again.
    await sleep(3_000)
    await Promise.all(Array.from({ length: BUYERS }, (_, i) => drain(i, i, Date.now() + 20_000)))
    log(`load done: ${JSON.stringify(counts)}`)

    // What the draws did, as each instance counted them (drawn, given_back, unknown: lost in flight, …).
    for (const inst of instances) {
      const text = await (await fetch(`${inst.adminUrl}/metrics`)).text()
      log(
        `${inst.url}: ${text
          .split('\n')
          .filter((l) => l.startsWith('tollgate_pass_draws_total'))
          .join(' · ')}`,
      )
    }
    const served = Array.from({ length: BUYERS }, (_, i) => upstream.served.get(`buyer${i}`) ?? 0)
    log(`upstream served per pass: ${served.join(', ')} (each bought ${N})`)
    expect(served).toEqual(Array.from({ length: BUYERS }, () => N))

    const sql = createSql(cluster.url, { max: 1 })
    try {
      const passes = await sql<{ uses_left: number; drawn: number; given_back: number }[]>`
        SELECT p.uses_left,
               count(d.nonce) FILTER (WHERE NOT d.given_back)::int AS drawn,
               count(d.nonce) FILTER (WHERE d.given_back)::int AS given_back
        FROM passes p LEFT JOIN pass_draws d ON d.pass_id = p.id
        WHERE p.endpoint_id = ${id} GROUP BY p.id`
      log(`books: ${JSON.stringify(passes)}`)
      expect(passes.map((p) => [p.uses_left, p.drawn])).toEqual(Array.from({ length: BUYERS }, () => [0, N]))
      // Every served call's receipt is on its draw: written after the answer, a batch at a time, and tried
      // again across the outages until the database took it.
      const recorded = await waitFor(
        async () => {
          const rows = await sql<{ n: number }[]>`
            SELECT count(d.receipt_id)::int AS n FROM passes p JOIN pass_draws d ON d.pass_id = p.id
            WHERE p.endpoint_id = ${id} AND NOT d.given_back GROUP BY p.id`
          return rows.every((r) => r.n === N) ? rows.length : undefined
        },
        { timeoutMs: 15_000, what: 'the receipts of every served pass call on its draw' },
      )
      expect(recorded).toBe(BUYERS)
      // The pass of time: no call served without its own draw (a sign-in message once), each served call's
      // receipt on its draw once the database took it; draws whose answer was lost may stay unserved.
      const servedTimed = upstream.served.get('timed') ?? 0
      expect(servedTimed).toBeGreaterThanOrEqual(TIMED_CALLS)
      const timedDraws = await waitFor(
        async () => {
          const [row] = await sql<{ drawn: number; receipts: number }[]>`
            SELECT count(d.nonce)::int AS drawn, count(d.receipt_id)::int AS receipts
            FROM passes p JOIN pass_draws d ON d.pass_id = p.id WHERE p.endpoint_id = ${tid}`
          return row!.receipts === servedTimed ? row : undefined
        },
        { timeoutMs: 15_000, what: 'the receipts of every served call on the pass of time' },
      )
      log(`pass of time: served ${servedTimed}, draws ${JSON.stringify(timedDraws)}`)
      expect(timedDraws.drawn).toBeGreaterThanOrEqual(servedTimed)
      const [calls] = await sql<{ n: number; owner: string }[]>`
        SELECT count(*)::int AS n, sum(owner_share_atomic)::text AS owner FROM calls
        WHERE endpoint_id = ${id} AND method = 'PASS'`
      expect(calls).toEqual({
        n: BUYERS,
        owner: String((PASS_PRICE_ATOMIC * 9500n * BigInt(BUYERS)) / 10_000n),
      })
      const [timedPurchase] = await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM calls WHERE endpoint_id = ${tid} AND method = 'PASS'`
      expect(timedPurchase!.n).toBe(1)
    } finally {
      await sql.end({ timeout: 1 })
    }
    expect(await runReconcile(cluster.url, chain, log)).toBe(0)
    log(`done in ${Date.now() - started} ms`)
    expect(Date.now() - started).toBeLessThan(90_000)
  })
})
