// One x402 payload's /settle, replayed 10 times concurrently in each of three rounds against two tollgate
// processes on one private PostgreSQL server, through a SIGKILL and a PostgreSQL crash restart:
//   round 1: mining paused, the 10 sends wait while the transaction carrying the payload (the claiming
//            instance's group commit's) sits in the mempool; the leader's process (the instance holding the
//            job lock, so its in-flight sends die with it) is SIGKILLed;
//   round 2: 10 more sends to the survivor, PostgreSQL restarted `immediate` (a crash) while they poll;
//   round 3: the killed instance started again on the same database, mining resumed, 10 more sends to both.
// Each of the 30 senders sends the same body again (to an instance alive) after a fault (503, a dropped
// connection) or a `settlement_pending` answer, until it gets an outcome. Judged on the chain (one
// AuthorizationUsed and one Transfer from the payer, in the transaction every answer names, the payer's
// wallet moved by the price once), the answers (the same body every time), the books (one claim, one
// settlement row) and reconcile (exit 0, every running balance equal to its entries).
// Twice: the payer an EOA, and a smart wallet not deployed yet (ERC-6492, its factory trusted), which the
// transaction carrying the payload deploys: deployed once, whichever instance's transaction mines it.
import { existsSync } from 'node:fs'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import postgres from 'postgres'
import { createPublicClient, type Hex, http, parseAbi, parseAbiItem } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { counterfactualSmartWallet, smartWalletFactory } from '../chain/contracts/smart-wallet.ts'
import { mine, setAutomine } from '../helpers/anvil.ts'
import { type ChildService, pidAlive } from '../helpers/child-service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { fundSettlerSlots } from '../x402/harness.ts'
import { startCountingUpstream } from './counting-upstream.ts'
import {
  balancesAgainstEntries,
  merchantEndpoint,
  runReconcile,
  startChaosWorld,
  startChildOn,
  startTwoChildren,
} from './harness.ts'

const PRICE_ATOMIC = 10_000n
/** The chain stands in for base-sepolia: the facilitator answers for a real network. */
const BASE_SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e'
const SENDS_PER_ROUND = 10
/** A sender gives up after this (the test then fails: every send must end with an outcome). */
const SENDER_DEADLINE_MS = 90_000
const usedEvent = parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)')
const transferEvent = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)')
const usdcAbi = parseAbi(['function balanceOf(address) view returns (uint256)'])
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Sender {
  round: number
  /** Every outcome (a 200 that is not settlement_pending), as sent. */
  outcomes: string[]
  pending: number
  faults: number
}

describe.runIf(existsSync('/usr/lib/postgresql'))(
  'chaos: facilitator /settle replayed through faults',
  () => {
    it.each([
      ['an EOA', 'eoa'],
      ['a counterfactual smart wallet', 'counterfactual'],
    ] as const)(
      '%s: 10 concurrent replays × 3 rounds, a SIGKILL of the leader, a PostgreSQL crash: one transfer, one answer',
      async (_, payerKind) => {
        const lines: string[] = []
        const log = (l: string) => lines.push(`${new Date().toISOString().slice(11, 23)} ${l}`)
        const context = () => lines.join('\n')
        const cleanups: Array<() => Promise<unknown>> = []
        try {
          const { cluster, chain, upstream } = await startChaosWorld(
            { payers: 1, payerFunding: 1_000_000_000n, chainId: 84532, usdcAt: BASE_SEPOLIA_USDC },
            startCountingUpstream,
            cleanups,
          )
          const funder = { rpcUrl: chain.rpcUrl, funderKey: chain.payers[0]!.privateKey }
          const factory = await smartWalletFactory(funder)
          const settings = {
            proxy: { allow_private_upstreams: true },
            x402: { eip6492_factories: [factory] },
            chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
            settlement: { interval_ms: 300, receipt_poll_ms: 100 },
            facilitator: { settle_wait_ms: 4_000 },
            log: { level: 'warn' },
          }
          const start = () => startChildOn(cluster, chain, settings, { NETWORK: 'base-sepolia' })
          // Gas for the settler slots both instances (and the restarted one) take, their data planes' and their
          // facilitator group commits': the payload goes out from the claiming instance's own settler.
          await fundSettlerSlots(chain.rpcUrl, chain.treasury.privateKey, 6)
          const all = await startTwoChildren(start, cleanups)
          const alive = new Set(all)
          const { key, ep } = await merchantEndpoint(all[0]!.url, 'Facilitator Chaos Co', {
            upstream_url: `${upstream.url}/echo`,
            price: Number(PRICE_ATOMIC) / 1e6,
          })

          // The payload: the published x402 client signs the metered 402's exact terms (payTo the treasury),
          // with a long window so the paused chain cannot expire it.
          const r402 = await fetch(`${all[0]!.url}/m/${ep.id}`)
          const required = decodePaymentRequiredHeader(r402.headers.get('payment-required')!)
          await r402.arrayBuffer()
          const terms = { ...required.accepts.find((a) => a.scheme === 'exact')!, maxTimeoutSeconds: 900 }
          const payer =
            payerKind === 'eoa'
              ? privateKeyToAccount(chain.payers[0]!.privateKey)
              : (
                  await counterfactualSmartWallet({
                    ...funder,
                    usdc: chain.usdcAddress,
                    amountAtomic: 1_000_000n,
                  })
                ).signer
          const x402 = new x402Client()
          registerExactEvmScheme(x402, { signer: payer as never })
          const payload = await x402.createPaymentPayload({ ...required, accepts: [terms] } as never)
          const nonce = (payload.payload as { authorization: { nonce: Hex } }).authorization.nonce
          const body = JSON.stringify({ x402Version: 2, paymentPayload: payload, paymentRequirements: terms })
          const reader = createPublicClient({ transport: http(chain.rpcUrl) })
          const balance = () =>
            reader.readContract({
              address: chain.usdcAddress,
              abi: usdcAbi,
              functionName: 'balanceOf',
              args: [payer.address],
            })
          const before = await balance()
          const fromBlock = await reader.getBlockNumber()

          const senders: Sender[] = []
          let turn = 0
          const pick = () => {
            const live = [...alive]
            return live[turn++ % live.length]!
          }
          // One sender: the body again after a fault or a pending answer, on the next instance alive.
          const send = async (s: Sender) => {
            const deadline = Date.now() + SENDER_DEADLINE_MS
            while (Date.now() < deadline) {
              const r = await fetch(`${pick().url}/api/v1/facilitator/settle`, {
                method: 'POST',
                headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
                body,
                signal: AbortSignal.timeout(30_000),
              }).catch(() => null)
              const text = r ? await r.text().catch(() => null) : null
              if (r?.status !== 200 || text === null) s.faults++
              else if ((JSON.parse(text) as { errorReason?: string }).errorReason === 'settlement_pending')
                s.pending++
              else return void s.outcomes.push(text)
              await sleep(300)
            }
          }
          // A round: SENDS_PER_ROUND senders at once, alternating the instances alive.
          const round = (n: number) =>
            Array.from({ length: SENDS_PER_ROUND }, () => {
              const s: Sender = { round: n, outcomes: [], pending: 0, faults: 0 }
              senders.push(s)
              return send(s)
            })

          // Round 1: mining paused; wait for the transaction carrying the payload to be in the mempool.
          await setAutomine(chain.rpcUrl, false)
          const db = postgres(cluster.url, { max: 1, onnotice: () => {} })
          cleanups.push(() => db.end())
          const round1 = round(1)
          await waitFor(
            async () => {
              const [row] = await db<{ tx: string | null }[]>`
            SELECT settlement_tx AS tx FROM claims WHERE target_type = 'facilitator'`
              return Boolean(row?.tx)
            },
            { timeoutMs: 30_000, intervalMs: 100, what: 'the claim carried by a sent transaction' },
          )
          const pendingTxs = await reader.getBlock({ blockTag: 'pending' }).then((b) => b.transactions.length)
          const [sent] = await db<
            { tx: Hex }[]
          >`SELECT settlement_tx AS tx FROM claims WHERE target_type = 'facilitator'`
          // The claiming instance's group commit sent it, from its settler slot, not the leader's treasury batch.
          const sender = (await reader.getTransaction({ hash: sent!.tx })).from
          log(`round 1: the transaction sent from ${sender}, ${pendingTxs} in the pending block`)
          await sleep(500)
          const leader = await leaderOf(all)
          log(`SIGKILL the leader pid ${leader.pid}`)
          alive.delete(leader)
          await leader.kill('SIGKILL')
          const killedGone = !pidAlive(leader.pid)

          // Round 2: the survivor alone; PostgreSQL crashes while these sends poll.
          const round2 = round(2)
          await sleep(500)
          log('pg restart immediate')
          await cluster.restart('immediate')

          // Round 3: the killed instance again, mining resumed, sends to both.
          const restarted = await start()
          all.push(restarted)
          alive.add(restarted)
          log(`restarted the killed instance as pid ${restarted.pid}`)
          await setAutomine(chain.rpcUrl, true)
          await mine(chain.rpcUrl)
          const round3 = round(3)
          await Promise.all([...round1, ...round2, ...round3])

          const outcomes = senders.flatMap((s) => s.outcomes)
          const distinct = new Set(outcomes)
          const answer = JSON.parse(outcomes[0] ?? '{}') as { success?: boolean; transaction?: Hex }
          const used = await reader.getLogs({
            address: chain.usdcAddress,
            event: usedEvent,
            args: { authorizer: payer.address, nonce },
            fromBlock,
          })
          const transfers = await reader.getLogs({
            address: chain.usdcAddress,
            event: transferEvent,
            args: { from: payer.address },
            fromBlock,
          })
          const moved = before - (await balance())
          const code = await reader.getCode({ address: payer.address })
          const [books] = await db<
            { claims: number; rows: number; settled: number; failed: number; status: string }[]
          >`
        SELECT (SELECT count(*) FROM claims WHERE target_type = 'facilitator')::int AS claims,
               (SELECT count(*) FROM facilitator_settlements)::int AS rows,
               (SELECT count(*) FROM facilitator_settlements WHERE settled_at IS NOT NULL)::int AS settled,
               (SELECT count(*) FROM claims WHERE settlement_error IS NOT NULL)::int AS failed,
               (SELECT string_agg(status, ',') FROM claims WHERE target_type = 'facilitator') AS status`
          const reconcileExit = await runReconcile(cluster.url, chain, log)
          const balances = await balancesAgainstEntries(cluster.url)
          const perRound = [1, 2, 3].map((n) => {
            const rs = senders.filter((s) => s.round === n)
            const sum = (f: (s: Sender) => number) => rs.reduce((a, s) => a + f(s), 0)
            return `round ${n}: ${sum((s) => s.outcomes.length)} outcomes, ${sum((s) => s.pending)} pending, ${sum((s) => s.faults)} faults`
          })
          const report = [
            `facilitator settle chaos: ${senders.length} senders, ${outcomes.length} outcomes, ${distinct.size} distinct;`,
            ...perRound.map((l) => `  ${l}`),
            `  on chain (${payerKind}): ${used.length} AuthorizationUsed, ${transfers.length} Transfer from the payer, moved ${moved}, code ${code ? 'yes' : 'no'};`,
            `  books: ${JSON.stringify(books)}; reconcile exit ${reconcileExit}, balances ${balances.checked} checked ${balances.drifted} drifted`,
          ].join('\n')
          process.stdout.write(`\n${report}\n${lines.join('\n')}\n`)
          log(report)

          expect(killedGone, context()).toBe(true)
          expect(sender.toLowerCase(), context()).not.toBe(chain.treasury.address.toLowerCase())
          // Every sender got an outcome, the same body, success with the transaction that carried it.
          expect(
            senders.filter((s) => s.outcomes.length !== 1),
            context(),
          ).toHaveLength(0)
          expect(distinct.size, context()).toBe(1)
          expect(answer.success, context()).toBe(true)
          // The faults landed on sends: the killed leader's and the crash's.
          expect(
            senders.reduce((a, s) => a + s.faults, 0),
            context(),
          ).toBeGreaterThan(0)
          // Round 1's sends were waiting on the mined-less batch when the leader died: each was answered
          // pending (its wait ran out first) or cut (the kill came first), which of the two is timing.
          expect(
            senders.filter((s) => s.round === 1 && s.pending + s.faults > 0).length,
            context(),
          ).toBeGreaterThan(0)
          // One transfer on chain, in the transaction every answer names.
          expect(used, context()).toHaveLength(1)
          expect(transfers, context()).toHaveLength(1)
          expect(used[0]!.transactionHash.toLowerCase(), context()).toBe(answer.transaction!.toLowerCase())
          expect(moved, context()).toBe(PRICE_ATOMIC)
          // The smart wallet exists now: deployed by the transaction that settled it (an EOA has no code).
          if (payerKind === 'counterfactual') expect(code, context()).toBeDefined()
          expect(books, context()).toEqual({ claims: 1, rows: 1, settled: 1, failed: 0, status: 'applied' })
          expect(reconcileExit, context()).toBe(0)
          expect(balances.checked, context()).toBeGreaterThan(0)
          expect(balances.drifted, context()).toBe(0)
        } finally {
          for (const c of cleanups.reverse()) await c().catch(() => {})
        }
      },
      300_000,
    )
  },
)

/** The instance holding the job lock, by its tollgate_jobs_leader gauge. */
async function leaderOf(instances: ChildService[]): Promise<ChildService> {
  for (const c of instances) {
    const text = await (await fetch(`${c.adminUrl}/metrics`)).text()
    if (/^tollgate_jobs_leader 1$/m.test(text)) return c
  }
  throw new Error('no instance is the leader')
}
