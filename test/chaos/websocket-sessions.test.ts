// The chaos round of paid WebSocket sessions: 100 sessions, each opened with a USDC transaction hash (its
// credit), are held open on two instances on one private PostgreSQL server against demo-realtime, each asking
// for an answer every few hundred milliseconds. PostgreSQL is restarted (fast, then a crash) while they run,
// then instance b's real server process is SIGKILLed with its sessions open. Judged against what the upstream
// counted it sent each session (by its x-request-id) and what each client received: no session charged more
// than the upstream sent it; every session on a charged exactly what its client received, to the base unit,
// the rest of its credit refunded; a session on b is unpaid only as docs/websockets.md bounds it (its claim
// still held, in doubt, no call row: refunded whole at the end of its window, never charged). Reconcile exits
// 0; every running balance equals its entries. Bounded: about a minute.
import { existsSync } from 'node:fs'
import postgres from 'postgres'
import { createPublicClient, createWalletClient, type Hex, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { startDemoRealtime } from '../../src/cli/demo-realtime.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { openWs, type WsSession } from '../helpers/ws-client.ts'
import {
  balancesAgainstEntries,
  merchantEndpoint,
  runReconcile,
  startChaosWorld,
  startChildOn,
  startTwoChildren,
} from './harness.ts'

const SESSIONS = 100
const CREDIT_ATOMIC = 50_000n
/** Per token, in base units: $2, $1 and $10 per million. */
const INPUT = 2n
const CACHED = 1n
const OUTPUT = 10n
const WORDS = 10
/** Sessions on a closed while PostgreSQL is down. */
const EARLY = 10
/** Each session asks for an answer this often. */
const ASK_MS = 400
const LOAD_MS = 16_000
const usdcAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Received {
  input: bigint
  cached: bigint
  output: bigint
  /** Deltas since the last response.done (charged one output token each when cut mid-answer). */
  pending: bigint
}

/** What a client received, in tokens: the usage of each response.done, and the deltas after the last. */
function received(s: WsSession): Received {
  const r: Received = { input: 0n, cached: 0n, output: 0n, pending: 0n }
  for (const m of s.messages) {
    if (m.includes('"response.text.delta"')) r.pending++
    else if (m.includes('"response.done"')) {
      const u = JSON.parse(m).response.usage
      r.input += BigInt(u.input_tokens - u.input_token_details.cached_tokens)
      r.cached += BigInt(u.input_token_details.cached_tokens)
      r.output += BigInt(u.output_tokens)
      r.pending = 0n
    }
  }
  return r
}

const price = (r: Received) => r.input * INPUT + r.cached * CACHED + (r.output + r.pending) * OUTPUT

describe.runIf(existsSync('/usr/lib/postgresql'))('chaos: paid WebSocket sessions through restarts', () => {
  it('100 sessions open, PostgreSQL restarted twice, an instance SIGKILLed: charged at most what was delivered', async () => {
    const lines: string[] = []
    const log = (l: string) => lines.push(`${new Date().toISOString().slice(11, 23)} ${l}`)
    const cleanups: Array<() => Promise<unknown>> = []
    try {
      const { cluster, chain, upstream } = await startChaosWorld(
        { payers: 1, payerFunding: 1_000_000_000n },
        () => startDemoRealtime(0),
        cleanups,
      )
      const start = () =>
        startChildOn(cluster, chain, {
          proxy: { allow_private_upstreams: true },
          chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
          log: { level: 'warn' },
        })
      const instances = await startTwoChildren(start, cleanups)
      const { ep } = await merchantEndpoint(instances[0]!.url, 'Realtime Chaos Co', {
        upstream_url: `${upstream.url}/v1/realtime`,
        pricing: {
          model: 'usage',
          unit: 'tokens',
          max_price: Number(CREDIT_ATOMIC) / 1e6,
          input_price_per_million: 2,
          cached_input_price_per_million: 1,
          output_price_per_million: 10,
        },
        websocket: {},
      })

      // One transaction hash per session, paid to the treasury ahead (the last one's receipt awaited).
      const reader = createPublicClient({ transport: http(chain.rpcUrl) })
      const wallet = createWalletClient({
        account: privateKeyToAccount(chain.payers[0]!.privateKey),
        transport: http(chain.rpcUrl),
      })
      const hashes: Hex[] = []
      for (let i = 0; i < SESSIONS; i++)
        hashes.push(
          await wallet.writeContract({
            address: chain.usdcAddress,
            abi: usdcAbi,
            functionName: 'transfer',
            args: [chain.treasury.address, CREDIT_ATOMIC],
            chain: null,
          }),
        )
      await reader.waitForTransactionReceipt({ hash: hashes.at(-1)! })

      // Even sessions on a, odd ones on b; all open before the first fault.
      const sessions = await Promise.all(
        hashes.map((hash, i) =>
          openWs(`${instances[i % 2]!.url}/m/${ep.id}`, { 'x-payment': hash, 'x-request-id': `chaos-${i}` }),
        ),
      )
      log(`${sessions.length} sessions open (${upstream.open()} upstream)`)
      const asked = sessions.map(() => 0)
      let loadOver = false
      // Ten sessions on a stop asking before the crash and are closed while PostgreSQL is down: their
      // capture is written once it is back.
      const early = new Set(Array.from({ length: EARLY }, (_, k) => 2 * k))
      let earlyStop = false
      const askers = sessions.map(async (s, i) => {
        await sleep((i * ASK_MS) / SESSIONS)
        while (!loadOver && !(earlyStop && early.has(i)) && s.ws.readyState === s.ws.OPEN) {
          s.ws.send(JSON.stringify({ type: 'response.create', response: { words: WORDS } }))
          asked[i]!++
          await sleep(ASK_MS)
        }
      })
      const faults = (async () => {
        await sleep(3_000)
        log('pg restart fast')
        await cluster.restart('fast')
        await sleep(2_000)
        earlyStop = true
        await sleep(500)
        log('pg restart immediate')
        const restarting = cluster.restart('immediate')
        await sleep(20)
        let closedEarly = 0
        for (const i of early) {
          const s = sessions[i]!
          if (s.count('response.done') !== asked[i]) continue
          s.ws.close(1000, 'early')
          closedEarly++
        }
        log(`${closedEarly} sessions on a closed while PostgreSQL restarts`)
        await restarting
        await sleep(2_500)
        log(`SIGKILL b pid ${instances[1]!.pid}`)
        await instances[1]!.kill('SIGKILL')
      })()
      await sleep(LOAD_MS)
      loadOver = true
      await Promise.all([...askers, faults])
      // Each session on a: every answer asked for has come, then the client closes it.
      const onA = sessions.filter((_, i) => i % 2 === 0)
      await waitFor(() => onA.every((s, k) => s.count('response.done') === asked[2 * k]), {
        timeoutMs: 15_000,
        what: 'every answer on a',
      })
      for (const s of onA) if (s.ws.readyState === s.ws.OPEN) s.ws.close(1000, 'done')
      const closes = await Promise.all(sessions.map((s) => s.closed))
      log(`closes on b: ${[...new Set(closes.filter((_, i) => i % 2 === 1).map((c) => c.code))].join(',')}`)

      const db = postgres(cluster.url, { max: 1, onnotice: () => {} })
      cleanups.push(() => db.end())
      const rows = async () =>
        db<{ proof_key: string; amount_atomic: string; refund_atomic: string; session: any }[]>`
          SELECT call_proof_key(proof_key, proof) AS proof_key, amount_atomic::text, refund_atomic::text,
                 usage->'session' AS session
          FROM calls WHERE endpoint_id = ${ep.id as string}`
      await waitFor(async () => (await rows()).length >= onA.length, {
        timeoutMs: 30_000,
        intervalMs: 250,
        what: 'every session on a has its row',
      })
      const byHash = new Map((await rows()).map((r) => [r.proof_key.slice(3), r]))
      const claims = new Map(
        (
          await db<{ proof_key: string; status: string }[]>`
            SELECT proof_key, status FROM claims WHERE target_id = ${ep.id as string}`
        ).map((c) => [c.proof_key.slice(3), c.status]),
      )

      let overSent = 0
      let notAsReceived = 0
      let unpaidOnA = 0
      let unpaidOnB = 0
      let unpaidOnBNotInDoubt = 0
      let refundWrong = 0
      for (let i = 0; i < SESSIONS; i++) {
        const hash = hashes[i]!.toLowerCase()
        const row = byHash.get(hash)
        const sent = upstream.sent.get(`chaos-${i}`)!
        // The most the upstream's messages could cost: its usage, plus its unreported deltas as output.
        const most =
          BigInt(sent.input_tokens - sent.cached_tokens) * INPUT +
          BigInt(sent.cached_tokens) * CACHED +
          BigInt(sent.output_tokens + sent.deltas - sent.reportedDeltas) * OUTPUT
        if (row === undefined) {
          if (i % 2 === 0) unpaidOnA++
          else {
            unpaidOnB++
            if (claims.get(hash) !== 'claimed') unpaidOnBNotInDoubt++
          }
          continue
        }
        const charge = BigInt(row.amount_atomic)
        if (charge > most) overSent++
        if (i % 2 === 0 && charge !== price(received(sessions[i]!))) notAsReceived++
        if (BigInt(row.refund_atomic) !== CREDIT_ATOMIC - charge) refundWrong++
      }
      const reconcileExit = await runReconcile(cluster.url, chain, log)
      const balances = await balancesAgainstEntries(cluster.url)
      const answers = sessions.reduce((n, s) => n + s.count('response.done'), 0)
      const summary = {
        answers,
        overSent,
        notAsReceived,
        unpaidOnA,
        unpaidOnB,
        unpaidOnBNotInDoubt,
        refundWrong,
        reconcileExit,
        drift: balances.drifted,
      }
      log(JSON.stringify(summary))
      const context = lines.join('\n')
      process.stdout.write(`${context}\n`)
      expect(answers, context).toBeGreaterThan(SESSIONS * 5)
      expect(overSent, context).toBe(0)
      expect(notAsReceived, context).toBe(0)
      expect(unpaidOnA, context).toBe(0)
      expect(refundWrong, context).toBe(0)
      // The documented bound: only sessions open on the killed process, each claim held (in doubt).
      expect(unpaidOnB, context).toBeLessThanOrEqual(SESSIONS / 2)
      expect(unpaidOnBNotInDoubt, context).toBe(0)
      expect(reconcileExit, context).toBe(0)
      expect(balances.drifted, context).toBe(0)
    } finally {
      for (const c of cleanups.reverse()) await c().catch(() => {})
    }
  })
})
