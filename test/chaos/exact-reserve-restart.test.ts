// The chaos round of x402 `exact` with a tight balance: a payer holding 4 prices pays call after call through
// two instances on one PostgreSQL server, restarted between calls (fast, then a crash). The reservation lives
// in the database (src/books/claims.ts), not in an instance's memory: across the restarts the payer is served
// exactly 4 calls, the rest refused insufficient_funds; every served call settles, the wallet is emptied
// exactly, reconcile exits 0. Paid by the published v2 client (@x402/evm exact).
// The second round settles before the answer (the default) under a PostgreSQL crash restart and a SIGKILL of
// one instance's server process (settle-before-answer-chaos.ts): it counts, against the chain and the
// counting upstream, authorizations settled twice, lost, receipts naming a transaction that did not carry
// them, and calls served unpaid; all must be 0 and reconcile clean.
import { existsSync } from 'node:fs'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import postgres from 'postgres'
import { createPublicClient, createWalletClient, http, parseAbi } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { merchantEndpoint, runReconcile, startChaosWorld, startChildOn, startTwoChildren } from './harness.ts'
import { formatSettleBeforeAnswer, runSettleBeforeAnswerChaos } from './settle-before-answer.ts'

const PRICE_ATOMIC = 10_000n
const HELD = 4n
const CALLS = 10
const usdcAbi = parseAbi([
  'function transfer(address to, uint256 value) returns (bool)',
  'function balanceOf(address) view returns (uint256)',
])

describe.runIf(existsSync('/usr/lib/postgresql'))(
  'chaos: x402 exact with a tight balance through restarts',
  () => {
    it('PostgreSQL restarted between calls: served exactly what the wallet holds, all settled', async () => {
      const lines: string[] = []
      const log = (l: string) => lines.push(l)
      const cleanups: Array<() => Promise<unknown>> = []
      try {
        const { cluster, chain, upstream } = await startChaosWorld(
          { payers: 1, payerFunding: 1_000_000_000n },
          startUpstream,
          cleanups,
        )
        const settings = {
          proxy: { allow_private_upstreams: true },
          chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
          settlement: { interval_ms: 500, receipt_poll_ms: 100 },
          x402: { balance_ttl_ms: 30_000 },
          log: { level: 'warn' },
        }
        const start = () => startChildOn(cluster, chain, settings)
        const instances = await startTwoChildren(start, cleanups)
        const { ep } = await merchantEndpoint(instances[0]!.url, 'Exact Chaos Co', {
          upstream_url: `${upstream.url}/echo`,
          price: Number(PRICE_ATOMIC) / 1e6,
        })
        const urls = instances.map((c) => `${c.url}/m/${ep.id}`)

        // A fresh payer holding exactly HELD prices.
        const payer = privateKeyToAccount(generatePrivateKey())
        const funder = createWalletClient({
          account: privateKeyToAccount(chain.payers[0]!.privateKey),
          transport: http(chain.rpcUrl),
        })
        const reader = createPublicClient({ transport: http(chain.rpcUrl) })
        await reader.waitForTransactionReceipt({
          hash: await funder.writeContract({
            address: chain.usdcAddress,
            abi: usdcAbi,
            functionName: 'transfer',
            args: [payer.address, HELD * PRICE_ATOMIC],
            chain: null,
          }),
        })
        const client = new x402Client()
        registerExactEvmScheme(client, { signer: payer as never })
        // The dev chain's token is not one the published client knows by address.
        client.setSpendControls(false)

        const statuses: number[] = []
        let retried = 0
        for (let i = 0; i < CALLS; i++) {
          if (i === 2) await cluster.restart('fast')
          if (i === 5) await cluster.restart('immediate')
          const url = urls[i % 2]!
          const required = decodePaymentRequiredHeader((await fetch(url)).headers.get('payment-required')!)
          const payload = await client.createPaymentPayload(required as never)
          const header = Buffer.from(JSON.stringify(payload)).toString('base64')
          // A restart costs a 503 and a retry with the same authorization, never the call.
          let status = 503
          const deadline = Date.now() + 30_000
          while (status === 503 && Date.now() < deadline) {
            const r = await fetch(url, { headers: { 'PAYMENT-SIGNATURE': header } }).catch(() => null)
            status = r?.status ?? 503
            if (r) await r.arrayBuffer()
            if (status === 503) {
              retried++
              await new Promise((s) => setTimeout(s, 200))
            }
          }
          statuses.push(status)
          log(`call ${i} on ${i % 2 === 0 ? 'a' : 'b'}: ${status}`)
        }
        const context = lines.join('\n')
        expect(
          statuses.filter((s) => s === 200),
          context,
        ).toHaveLength(Number(HELD))
        expect(
          statuses.filter((s) => s === 402),
          context,
        ).toHaveLength(CALLS - Number(HELD))
        expect(upstream.count(), context).toBe(Number(HELD))
        log(`503s retried: ${retried}`)

        const db = postgres(cluster.url, { max: 1, onnotice: () => {} })
        cleanups.push(() => db.end())
        await waitFor(
          async () => {
            const [row] = await db<{ n: number }[]>`
            SELECT count(*)::int AS n FROM claims WHERE kind = 'eip3009' AND status = 'captured'
              AND settled_at IS NULL AND settlement_error IS NULL`
            return row!.n === 0
          },
          { timeoutMs: 60_000, intervalMs: 250, what: 'every served authorization settled' },
        )
        const [failed] = await db<{ n: number }[]>`
        SELECT count(*)::int AS n FROM claims WHERE kind = 'eip3009' AND settlement_error IS NOT NULL`
        expect(failed!.n, context).toBe(0)
        const left = await reader.readContract({
          address: chain.usdcAddress,
          abi: usdcAbi,
          functionName: 'balanceOf',
          args: [payer.address],
        })
        expect(left, context).toBe(0n)
        expect(await runReconcile(cluster.url, chain, log), lines.join('\n')).toBe(0)
      } finally {
        for (const c of cleanups.reverse()) await c().catch(() => {})
      }
    }, 240_000)

    it('settled before the answer through a SIGKILL and a PostgreSQL crash: none twice, lost or falsely receipted', async () => {
      const lines: string[] = []
      const log = (l: string) => lines.push(l)
      const r = await runSettleBeforeAnswerChaos({ loadMs: 12_000, killAtMs: 4_000, crashAtMs: 7_000, log })
      const report = `${lines.join('\n')}\n${formatSettleBeforeAnswer(r)}`
      // The counts are the result of this round: printed whatever the verdict.
      console.log(`settle-before-answer chaos:\n${report}`)
      expect(r.kill.signal, report).toBe('SIGKILL')
      expect(r.kill.pidGone, report).toBe(true)
      expect(r.answered, report).toBeGreaterThan(10)
      expect(r.answeredSettled, report).toBeGreaterThan(0)
      expect(r.settledTwice, report).toBe(0)
      expect(r.lost, report).toBe(0)
      expect(r.falseReceipts, report).toBe(0)
      expect(r.falseRecorded, report).toBe(0)
      expect(r.servedUnpaid, report).toBe(0)
      expect(r.paidNotServed, report).toBe(0)
      expect(r.servedTwice, report).toBe(0)
      expect(r.gaveUp, report).toBe(0)
      expect(r.counterfactualAnswered, report).toBeGreaterThan(0)
      expect(r.counterfactualDeployed, report).toBeGreaterThan(0)
      expect(r.counterfactualMissing, report).toBe(0)
      expect(r.reconcileExit, report).toBe(0)
      expect(r.balanceDrift, report).toBe(0)
    }, 240_000)
  },
)
