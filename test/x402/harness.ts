// One x402 settlement setup for the tests and the sustained-load script: a private anvil as base-sepolia
// (chain id 84532, x402 clients only know real network names), an upstream, the service, one endpoint; headers
// signed by the published `x402` v1 client (createPaymentHeader), one fresh authorization per call.
// No vitest here: test/x402/sustained-load.ts runs it as a plain script.

import {
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  parseAbi,
  parseEther,
  publicActions,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { createPaymentHeader, selectPaymentRequirements } from 'x402/client'
import { type PaymentRequirements, PaymentRequirementsSchema } from 'x402/types'
import { type DevChain, type DevChainOptions, fundDevGas } from '../../src/chain/dev-chain.ts'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { loadConfig } from '../../src/config/load.ts'
import type { Settings } from '../../src/config/schema.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { type Service, startService } from '../../src/service.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] }

const erc20 = parseAbi([
  'function balanceOf(address account) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
])

export interface X402Setup {
  chain: DevChain
  svc: Service
  upstream: Upstream
  meteredUrl: string
  ownerWallet: Address
  priceAtomic: bigint
  /** RPC URL the service uses (the chain's, or a proxy in front of it). */
  rpcUrl: string
  requirements(): Promise<PaymentRequirements>
  /** Signs `n` headers, one fresh authorization each, round-robin over the payers; payer index per header. */
  sign(n: number, requirements?: PaymentRequirements): Promise<Array<{ header: string; payer: number }>>
  pay(header: string): Promise<{ status: number; retryAfter: string | null; body: any }>
  balanceOf(owner: Address): Promise<bigint>
  authorizationUsed(from: Address, nonce: Hex): Promise<boolean>
  settlementState(): Promise<SettlementState>
  reconcileDifferences(): Promise<string[]>
  stop(): Promise<void>
}

export interface SettlementState {
  captured: number
  settled: number
  expired: number
  reverted: number
  backlog: number
  ownerShareAtomic: bigint
  feeAtomic: bigint
  /** Ledger entries of calls whose authorization is not settled (must be 0). */
  unsettledBookedEntries: number
}

/** Base Sepolia's USDC: the test token is put at this address, where the published v2 clients know it as USDC. */
export const BASE_SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e'

/**
 * A private anvil as base-sepolia for the published v2 clients: chain id 84532, the token at Base Sepolia's
 * USDC address. Stop it in afterAll.
 */
export function startBaseSepoliaChain(options: Partial<DevChainOptions> = {}): Promise<DevChain> {
  return startTestChain({ chainId: 84532, usdcAt: BASE_SEPOLIA_USDC, ...options })
}

/** Registers a merchant with this wallet and name on the service at `url`; its API key. */
export async function registerMerchantKey(
  url: string,
  wallet: Address,
  businessName: string,
): Promise<string> {
  const reg = await callApi(url, '/api/v1/register', {
    body: { wallet_address: wallet, business_name: businessName },
  })
  if (reg.status !== 201) throw new Error(`register: ${reg.status} ${reg.text}`)
  return reg.body.api_key as string
}

/**
 * What an x402 client is handed: a viem wallet client with public actions (x402's SignerWallet) on Base
 * Sepolia, talking to the private anvil. The chain is widened to `Chain` only for the types: x402's
 * SignerWallet is declared over the generic Chain, and Base Sepolia's OP-stack formatters do not fit it.
 */
export function baseSepoliaWallet(chain: DevChain, key: Hex) {
  return createWalletClient({
    account: privateKeyToAccount(key),
    chain: baseSepolia as Chain,
    transport: http(chain.rpcUrl),
  }).extend(publicActions)
}

/** Sends `amount` of the test token from `from` to `to`, and waits until it is mined. */
export async function sendUsdc(
  from: ReturnType<typeof baseSepoliaWallet>,
  chain: DevChain,
  to: Address,
  amount: bigint,
): Promise<void> {
  const hash = await from.writeContract({
    address: chain.usdcAddress,
    abi: parseAbi(['function transfer(address to, uint256 value) returns (bool)']),
    functionName: 'transfer',
    args: [to, amount],
  })
  await from.waitForTransactionReceipt({ hash })
}

/** The test token's balance of `owner` on `chain`, read from the chain itself. */
export function usdcBalanceOf(chain: DevChain, owner: Address): Promise<bigint> {
  const reader = createPublicClient({ transport: http(chain.rpcUrl) })
  return reader.readContract({
    address: chain.usdcAddress,
    abi: erc20,
    functionName: 'balanceOf',
    args: [owner],
  })
}

/**
 * A service on `chain` (chain id 84532) announced as base-sepolia, the network the published x402 clients
 * know, talking to the chain through `rpcUrl` (the chain's, or a proxy in front of it).
 */
export async function startBaseSepoliaService(
  chain: DevChain,
  rpcUrl: string,
  overrides?: DeepPartial<Settings>,
  logLevel: 'error' | 'warn' | 'info' = 'warn',
  env: Record<string, string> = {},
): Promise<Service> {
  // A DATABASE_URL in env is the one the instance shares with another: no fresh database for it.
  const databaseUrl = env.DATABASE_URL ?? (await freshDatabaseUrl())
  const config = loadConfig({
    env: {
      NODE_ENV: 'test',
      NETWORK: 'base-sepolia',
      RPC_URL: rpcUrl,
      USDC_ADDRESS: chain.usdcAddress,
      TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
      ...env,
    },
    overrides: { database: { data_dir: 'memory://' }, ...(overrides as object) } as never,
  })
  // The settler slots' keys are derived from the treasury's here (no SETTLER_PRIVATE_KEY): a chain announced as
  // base-sepolia is not the local dev chain, so no one tops them up; give the first few anvil ETH, as an
  // operator funds them (docs/operations.md). A test that names its own settler key funds it (or not) itself.
  if (env.SETTLER_PRIVATE_KEY === undefined) await fundSettlerSlots(rpcUrl, chain.treasury.privateKey, 4)
  return startService(config, { logger: createLogger(logLevel) })
}

/**
 * Two instances as startBaseSepoliaService makes them, sharing one fresh server database (PGlite is one
 * session): where the tests that a proof serves once, whichever instance takes it, start.
 */
export async function startBaseSepoliaPair(
  chain: DevChain,
  overrides?: DeepPartial<Settings>,
): Promise<[Service, Service]> {
  const databaseUrl = await freshDatabaseUrl()
  if (!databaseUrl) throw new Error('two instances share a PostgreSQL server: set DATABASE_URL')
  const env = { DATABASE_URL: databaseUrl }
  const a = await startBaseSepoliaService(chain, chain.rpcUrl, overrides, 'warn', env)
  const b = await startBaseSepoliaService(chain, chain.rpcUrl, overrides, 'warn', env)
  return [a, b]
}

/**
 * Anvil ETH for settler slots 0..count-1 derived from this treasury key (what an operator would send), and
 * for the last `count` of the default 16: the facilitator's group commit takes those on PGlite.
 */
export async function fundSettlerSlots(rpcUrl: string, treasuryKey: Hex, count: number): Promise<void> {
  const client = createWalletClient({ transport: http(rpcUrl) })
  const slots = Array.from({ length: count }, (_, i) => i)
  for (const slot of [...slots, ...slots.map((i) => 15 - i)]) {
    const key = settlerSlotKey({ settlerKey: null, treasuryKey }, slot)!
    await fundDevGas(client as never, privateKeyToAccount(key).address, parseEther('10'))
  }
}

export async function startX402Setup(
  options: {
    priceUsd?: number
    overrides?: DeepPartial<Settings>
    /** Put something (a proxy) in front of the chain's RPC; gets the chain's URL, returns the one to use. */
    rpcUrlFor?: (chainRpcUrl: string) => Promise<string>
    logLevel?: 'error' | 'warn' | 'info'
    /** Extra environment for the service's configuration (e.g. SETTLER_PRIVATE_KEY). */
    env?: Record<string, string>
  } = {},
): Promise<X402Setup> {
  const chain = await startTestChain({ chainId: 84532 })
  const upstream = await startUpstream()
  const rpcUrl = options.rpcUrlFor ? await options.rpcUrlFor(chain.rpcUrl) : chain.rpcUrl
  const svc = await startBaseSepoliaService(chain, rpcUrl, options.overrides, options.logLevel, options.env)
  const ownerWallet = chain.payers[4]!.address
  const reg = await callApi(svc.url, '/api/v1/register', {
    body: { wallet_address: ownerWallet, business_name: 'x402 settle Co' },
  })
  if (reg.status !== 201) throw new Error(`register: ${reg.status}`)
  const priceUsd = options.priceUsd ?? 0.001
  const ep = await callApi(svc.url, '/api/v1/endpoints', {
    key: reg.body.api_key,
    body: { upstream_url: `${upstream.url}/echo`, price: priceUsd },
  })
  if (ep.status !== 201) throw new Error(`endpoint: ${ep.status}`)
  const meteredUrl: string = ep.body.metered_url
  const reader = createWalletClient({ chain: baseSepolia as Chain, transport: http(chain.rpcUrl) }).extend(
    publicActions,
  )
  // Payers 0-3 pay; payer 4 owns the endpoint.
  const wallets = chain.payers.slice(0, 4).map((p) => baseSepoliaWallet(chain, p.privateKey))

  const requirements = async (): Promise<PaymentRequirements> => {
    const r = await fetch(meteredUrl)
    if (r.status !== 402) throw new Error(`expected 402, got ${r.status}`)
    const body = (await r.json()) as { accepts: unknown[] }
    return selectPaymentRequirements(
      body.accepts.map((a) => PaymentRequirementsSchema.parse(a)),
      'base-sepolia',
      'exact',
    )
  }

  return {
    chain,
    svc,
    upstream,
    meteredUrl,
    ownerWallet,
    priceAtomic: BigInt(Math.round(priceUsd * 1e6)),
    rpcUrl,
    requirements,
    async sign(n, given) {
      const req = given ?? (await requirements())
      const out: Array<{ header: string; payer: number }> = []
      for (let i = 0; i < n; i++) {
        const payer = i % wallets.length
        out.push({ header: await createPaymentHeader(wallets[payer]!, 1, req), payer })
      }
      return out
    },
    async pay(header) {
      const r = await fetch(meteredUrl, { headers: { 'X-PAYMENT': header } })
      const text = await r.text()
      let body: any = null
      try {
        body = JSON.parse(text)
      } catch {}
      return { status: r.status, retryAfter: r.headers.get('retry-after'), body }
    },
    balanceOf: (owner) =>
      reader.readContract({
        address: chain.usdcAddress,
        abi: erc20,
        functionName: 'balanceOf',
        args: [owner],
      }),
    authorizationUsed: (from, nonce) =>
      reader.readContract({
        address: chain.usdcAddress,
        abi: erc20,
        functionName: 'authorizationState',
        args: [from, nonce],
      }),
    async settlementState() {
      const [c] = await svc.sql<
        {
          captured: number
          settled: number
          expired: number
          reverted: number
          backlog: number
        }[]
      >`
        SELECT count(*)::int AS captured,
               count(*) FILTER (WHERE settled_at IS NOT NULL)::int AS settled,
               count(*) FILTER (WHERE settlement_error = 'expired')::int AS expired,
               count(*) FILTER (WHERE settlement_error = 'reverted')::int AS reverted,
               count(*) FILTER (WHERE settled_at IS NULL AND settlement_error IS NULL)::int AS backlog
        FROM claims WHERE kind = 'eip3009' AND status = 'captured'`
      // Booked: the entries of the settlement batches the x402 calls name (reconcile holds each batch to
      // the sum of its calls); booked too early: a call that names one while its claim is unsettled.
      const [l] = await svc.sql<{ owner: string; fee: string; unsettled: number }[]>`
        WITH x AS (
          SELECT c.ledger_batch_id, k.settled_at FROM calls c
          JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof)
          WHERE k.kind = 'eip3009' AND c.ledger_batch_id IS NOT NULL
        )
        SELECT coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0)::text AS owner,
               coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee'), 0)::text AS fee,
               (SELECT count(*) FROM x WHERE settled_at IS NULL)::int AS unsettled
        FROM ledger_entries e
        WHERE e.source_type = 'settlement_batch' AND e.source_id IN (SELECT ledger_batch_id::text FROM x)`
      return {
        ...c!,
        ownerShareAtomic: BigInt(l!.owner),
        feeAtomic: BigInt(l!.fee),
        unsettledBookedEntries: l!.unsettled,
      }
    },
    async reconcileDifferences() {
      const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
      return report.differences
    },
    async stop() {
      await svc.stop()
      await upstream.close()
      await chain.stop()
    },
  }
}

/** Sends the headers with `concurrency` requests in flight; returns statuses and the serving rate. */
export async function fire(
  setup: X402Setup,
  headers: string[],
  concurrency: number,
): Promise<{ statuses: Map<number, number>; elapsedMs: number; callsPerS: number }> {
  const statuses = new Map<number, number>()
  let next = 0
  const started = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < headers.length) {
        const h = headers[next++]!
        const r = await setup.pay(h)
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1)
      }
    }),
  )
  const elapsedMs = performance.now() - started
  return { statuses, elapsedMs, callsPerS: (headers.length / elapsedMs) * 1000 }
}

/** Polls until no captured authorization is waiting; returns how long it took and the largest backlog seen. */
export async function waitForDrain(
  setup: X402Setup,
  timeoutMs: number,
): Promise<{ drainedMs: number; maxBacklog: number; state: SettlementState }> {
  const started = performance.now()
  let maxBacklog = 0
  let backlog = -1
  const state = await waitFor(
    async () => {
      await setup.svc.flushCaptures()
      const state = await setup.settlementState()
      backlog = state.backlog
      maxBacklog = Math.max(maxBacklog, backlog)
      return backlog === 0 && state
    },
    { timeoutMs, intervalMs: 200, what: () => `an empty settlement backlog (still ${backlog})` },
  )
  return { drainedMs: performance.now() - started, maxBacklog, state }
}
