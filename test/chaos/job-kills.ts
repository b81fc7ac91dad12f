// The background jobs killed mid-run: x402 settlement SIGKILLed right after its first broadcast (the rest of its
// batch signed and recorded, not sent), then the payout batch SIGKILLed right after its broadcast, each time the
// real server process (its PID gone), each restarted on the same PostgreSQL server. Judged from the chain and
// the books: every authorization settled exactly once, every owner share booked once, the owner paid exactly
// its share in confirmed payouts, the treasury's transfers matching, and `npm run reconcile` exit 0.
import { type Address, type Chain, createWalletClient, http, parseAbiItem, publicActions } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { createPaymentHeader, selectPaymentRequirements } from 'x402/client'
import { PaymentRequirementsSchema } from 'x402/types'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { postJson } from '../helpers/api.ts'
import { type ChildService, pidAlive, startChildService } from '../helpers/child-service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { startCountingUpstream } from './counting-upstream.ts'
import { balancesAgainstEntries, runReconcile } from './harness.ts'
import { startPgCluster } from './pg-cluster.ts'

const PRICE_ATOMIC = 1_000n
const OWNER_SHARE_BPS = 9_500n
const transfer = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)')

export interface JobKillsResult {
  authorizations: number
  served: number
  /** Authorizations whose transfer to the treasury is on chain (each can settle once: its nonce is spent). */
  settledOnChain: number
  /** Captured x402 claims the books mark settled. */
  settledInBooks: number
  ownerShareBookedAtomic: bigint
  expectedOwnerShareAtomic: bigint
  ownerPaidAtomic: bigint
  payoutsConfirmed: number
  payoutTransfers: number
  /** Each killed process: its fault point, how it ended, and whether its PID is gone. */
  kills: Array<{ point: string; signal: string | null; pidGone: boolean }>
  reconcileExit: number | null
  /** Running balances (accounts, wallets) recomputed from their entries at the end, and how many differ. */
  balancesChecked: number
  balanceDrift: number
  ok: boolean
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export async function runJobKills(options: {
  authorizations: number
  log(line: string): void
}): Promise<JobKillsResult> {
  const { log } = options
  const cleanups: Array<() => Promise<unknown>> = []
  try {
    const cluster = await startPgCluster()
    cleanups.push(() => cluster.destroy())
    const chain: DevChain = await startTestChain({ chainId: 84532 })
    cleanups.push(() => chain.stop())
    const upstream = await startCountingUpstream()
    cleanups.push(() => upstream.close())
    const owner = privateKeyToAccount(generatePrivateKey()).address

    const settings = (jobs: 'none' | 'settlement' | 'all') => ({
      proxy: { allow_private_upstreams: true },
      chain: { poll_interval_ms: 100 },
      settlement: { interval_ms: jobs === 'none' ? 3_600_000 : 200, receipt_poll_ms: 100 },
      payouts:
        jobs === 'all'
          ? { interval_ms: 500, threshold_check_interval_ms: 500, min_amount: 0.001, threshold: 0.001 }
          : { interval_ms: 3_600_000, threshold_check_interval_ms: 3_600_000 },
      log: { level: 'warn' },
    })
    const start = (point: string | null, jobs: 'none' | 'settlement' | 'all') =>
      startChildService({
        databaseUrl: cluster.url,
        treasuryKey: chain.treasury.privateKey,
        rpcUrl: chain.rpcUrl,
        usdcAddress: chain.usdcAddress,
        env: { NETWORK: 'base-sepolia', ...(point ? { TOLLGATE_FAULT_POINT: point } : {}) },
        settings: settings(jobs),
      })
    const kills: JobKillsResult['kills'] = []
    const awaitKill = async (child: ChildService, point: string) => {
      const signal = await Promise.race([child.exited, sleep(60_000).then(() => 'timeout' as const)])
      if (signal === 'timeout') await child.kill('SIGKILL')
      kills.push({
        point,
        signal: signal === 'timeout' ? 'not reached' : signal,
        pidGone: !pidAlive(child.pid),
      })
      log(
        `   ${point}: pid ${child.pid} ${signal === 'timeout' ? 'never reached the point' : `ended ${signal}`}`,
      )
    }

    // 1. Calls are paid and served (no job runs yet); the process stops cleanly, its captures written.
    const first = await start(null, 'none')
    cleanups.push(() => first.kill('SIGKILL'))
    const api = (path: string, body: unknown, key?: string) => postJson(first.url, path, body, key)
    const reg = await api('/api/v1/register', { wallet_address: owner, business_name: 'Job kills Co' })
    const ep = await api(
      '/api/v1/endpoints',
      { upstream_url: `${upstream.url}/work`, price: Number(PRICE_ATOMIC) / 1e6 },
      reg.api_key as string,
    )
    const path = `/m/${ep.id as string}/work`
    const challenge = await fetch(`${first.url}${path}`)
    const accepts = ((await challenge.json()) as { accepts: unknown[] }).accepts
    const requirements = selectPaymentRequirements(
      accepts.map((a) => PaymentRequirementsSchema.parse(a)),
      'base-sepolia',
      'exact',
    )
    const wallets = chain.payers.map((p) =>
      createWalletClient({
        account: privateKeyToAccount(p.privateKey),
        chain: baseSepolia as Chain,
        transport: http(chain.rpcUrl),
      }).extend(publicActions),
    )
    let served = 0
    for (let i = 0; i < options.authorizations; i++) {
      const header = await createPaymentHeader(wallets[i % wallets.length]!, 1, requirements)
      const res = await fetch(`${first.url}${path}?p=x${i}`, { headers: { 'X-PAYMENT': header } })
      await res.text()
      if (res.status === 200) served++
    }
    log(`   ${served}/${options.authorizations} x402 calls served`)
    await first.kill('SIGTERM')

    // 2. Settlement runs and is killed right after its first broadcast.
    const settling = await start('settlement:after_broadcast', 'settlement')
    cleanups.push(() => settling.kill('SIGKILL'))
    await awaitKill(settling, 'settlement:after_broadcast')

    // 3. Restarted: settlement finishes; the payout batch is killed right after its broadcast.
    const second = await start('payout:after_broadcast', 'all')
    cleanups.push(() => second.kill('SIGKILL'))
    await awaitKill(second, 'payout:after_broadcast')

    // 4. Restarted without a fault: everything left open is resolved.
    const third = await start(null, 'all')
    cleanups.push(() => third.kill())
    const postgres = (await import('postgres')).default
    const db = postgres(cluster.url, { max: 1, onnotice: () => {} })
    cleanups.push(() => db.end({ timeout: 1 }))
    const expectedOwnerShareAtomic = (BigInt(served) * PRICE_ATOMIC * OWNER_SHARE_BPS) / 10_000n
    await waitFor(
      async () => {
        const [r] = await db<{ settled: number; open: number; paid: string }[]>`
          SELECT (SELECT count(*)::int FROM claims WHERE kind = 'eip3009' AND settled_at IS NOT NULL) AS settled,
                 (SELECT count(*)::int FROM payouts WHERE status IN ('pending', 'submitted')) AS open,
                 (SELECT coalesce(sum(amount_atomic), 0)::text FROM payouts
                   WHERE status = 'confirmed' AND kind = 'payout') AS paid`
        return r!.settled === served && r!.open === 0 && BigInt(r!.paid) === expectedOwnerShareAtomic
      },
      { what: 'every authorization settled and the owner paid', timeoutMs: 90_000, intervalMs: 100 },
    ).catch((err) => log(`   ${(err as Error).message}`))
    // A negative check: a few more job runs (every 200–500 ms) must send nothing more.
    await sleep(1_000)

    const reader = createWalletClient({ chain: baseSepolia as Chain, transport: http(chain.rpcUrl) }).extend(
      publicActions,
    )
    const toTreasury = await reader.getLogs({
      address: chain.usdcAddress,
      event: transfer,
      args: { to: chain.treasury.address },
      fromBlock: 0n,
    })
    const payerSet = new Set(chain.payers.map((p) => p.address.toLowerCase()))
    const settledOnChain = toTreasury.filter(
      (l) => payerSet.has(l.args.from!.toLowerCase()) && l.args.value === PRICE_ATOMIC,
    ).length
    const toOwner = await reader.getLogs({
      address: chain.usdcAddress,
      event: transfer,
      args: { from: chain.treasury.address, to: owner as Address },
      fromBlock: 0n,
    })
    const [books] = await db<{ settled: number; share: string; confirmed: number }[]>`
      SELECT (SELECT count(*)::int FROM claims WHERE kind = 'eip3009' AND settled_at IS NOT NULL) AS settled,
             (SELECT coalesce(sum(amount_atomic), 0)::text FROM ledger_entries WHERE kind = 'owner_share') AS share,
             (SELECT count(*)::int FROM payouts WHERE status = 'confirmed' AND kind = 'payout') AS confirmed`
    const ownerPaidAtomic = toOwner.reduce((s, l) => s + l.args.value!, 0n)
    const reconcileExit = await runReconcile(cluster.url, chain, log)
    const balances = await balancesAgainstEntries(cluster.url)
    const result: Omit<JobKillsResult, 'ok'> = {
      authorizations: options.authorizations,
      served,
      settledOnChain,
      settledInBooks: books!.settled,
      ownerShareBookedAtomic: BigInt(books!.share),
      expectedOwnerShareAtomic,
      ownerPaidAtomic,
      payoutsConfirmed: books!.confirmed,
      payoutTransfers: toOwner.length,
      kills,
      reconcileExit,
      balancesChecked: balances.checked,
      balanceDrift: balances.drifted,
    }
    const ok =
      served === options.authorizations &&
      settledOnChain === served &&
      result.settledInBooks === served &&
      result.ownerShareBookedAtomic === expectedOwnerShareAtomic &&
      ownerPaidAtomic === expectedOwnerShareAtomic &&
      result.payoutTransfers === result.payoutsConfirmed &&
      kills.every((k) => k.signal === 'SIGKILL' && k.pidGone) &&
      reconcileExit === 0 &&
      balances.checked > 0 &&
      balances.drifted === 0
    return { ...result, ok }
  } finally {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
  }
}

export function formatJobKills(r: JobKillsResult): string {
  return [
    'jobs killed mid-run (SIGKILL of the real server process, restarted on the same database):',
    ...r.kills.map((k) => `  ${k.point}: ${k.signal}, pid gone: ${k.pidGone}`),
    `  x402 authorizations ${r.authorizations}, served ${r.served}, settled on chain ${r.settledOnChain}, settled in the books ${r.settledInBooks}`,
    `  owner share booked ${r.ownerShareBookedAtomic} (expected ${r.expectedOwnerShareAtomic}), paid on chain ${r.ownerPaidAtomic} in ${r.payoutTransfers} transfer(s), ${r.payoutsConfirmed} payout(s) confirmed`,
    `  reconcile exit ${r.reconcileExit}`,
    `  running balances drifted from their entries: ${r.balanceDrift} of ${r.balancesChecked}`,
    `  ${r.ok ? 'OK' : 'FAILED'}`,
  ].join('\n')
}
