// The data plane's start(deps): hot-path state (caches, the one verifier, the group-commit writers, the
// upstream pool, the transfer watcher), the public uWS app on its port, and how to drain it all.

import { keccak256, toHex } from 'viem'
import { BatchWriter } from '../books/batch-writer.ts'
import { createAuthorizationChainChecker } from '../chain/check-authorization.ts'
import type { ChainContext } from '../chain/connect.ts'
import type { ChainInfo } from '../chain/info.ts'
import { isOwnMoney } from '../chain/own-transactions.ts'
import { simulateTransferAuthorization } from '../chain/simulate-authorization.ts'
import type { TreasuryTransfer } from '../chain/transfer.ts'
import { counterfactualWallets, smartWalletVerifier } from '../chain/verify-smart-wallet.ts'
import { verifyTransfer } from '../chain/verify-transfer.ts'
import { verifyWalletMessage } from '../chain/verify-wallet-message.ts'
import { type TransferWatcher, watchTreasuryTransfers } from '../chain/watcher.ts'
import type { Config } from '../config/schema.ts'
import { type NonceClaim, NonceClaims } from '../db/identity-nonces.ts'
import { listenForEndpointChanges } from '../db/notify.ts'
import type { Database } from '../db/start.ts'
import { loadWatcherCursor, saveWatcherCursor } from '../db/watcher-cursors.ts'
import type { ApiHandler } from '../http-exchange.ts'
import { identityFromConfig } from '../identity/from-config.ts'
import { checkSignature, claimIdentityNonce } from '../identity/verify-request.ts'
import { configDollars } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import {
  booksWriteDuration,
  booksWrites,
  captureBatchSize,
  captureQueue,
  captureRetries,
  claimBatchSize,
  rpcDuration,
} from '../observability/metrics.ts'
import { createUsedProofCache, createVerifiedTransferCache } from '../schemes/caches.ts'
import { registeredSchemes } from '../schemes/index.ts'
import { SchemeRegistry } from '../schemes/registry.ts'
import { Verifier } from '../schemes/verifier.ts'
import type { Started } from '../subsystem.ts'
import { createEdgeLimits, createPublicApp, listen, type ProofEdge, proofEdge, type UwsRoute } from './app.ts'
import { createDiscoveryRoutes } from './discovery.ts'
import { createEndpointCache, type EndpointCache, type EndpointCacheOptions } from './endpoint-cache.ts'
import { createMeteredRoute, type MeteredIdentity } from './metered.ts'
import { ObservedCalls } from './observed-calls.ts'
import { PaidAnswers } from './paid-answers.ts'
import { createPassPurchaseRoute } from './pass-purchase.ts'
import { PassUses } from './pass-uses.ts'
import { type ProofHorizons, startProofHorizons } from './proof-horizons.ts'
import { ReceiptSigner } from './receipt-signer.ts'
import { createReceiptKeysRoute, createReceiptRoute } from './receipts.ts'
import { readBacklog, startSettlementThrottle } from './settlement-throttle.ts'
import { SignIn } from './sign-in.ts'
import { ToolCatalogs } from './tool-catalogs.ts'
import { createUpstreamDispatcher } from './upstream-pool.ts'
import { startEndpointRelay, workerEnv } from './workers.ts'
import { createWebsocketBehavior } from './ws-session.ts'

export interface DataPlaneDeps {
  config: Config
  db: Database
  chain: ChainContext
  chainInfo: ChainInfo
  logger: Logger
  publicUrl(): string
  /** The control plane's /api/v1 handler, given this plane's cache invalidation (the planes never import each other). */
  apiHandler(onEndpointChanged: (id: string) => Promise<void> | undefined): ApiHandler
  /**
   * The /pay/* route, given this plane's verifier and its rate limits (built by service.ts: checkout sits on
   * top of this plane).
   */
  checkoutRoute(verifier: Verifier, edge: ProofEdge): UwsRoute
  /** /dashboard and its static assets (built by service.ts: the page acts through /api/v1 only). */
  dashboardRoute(): UwsRoute
  /** Plain treasury transfers the watcher saw, for checkout to match to payments by amount; a throw rescans. */
  attributeTransfers(transfers: TreasuryTransfer[]): Promise<void>
  /** The clock proofs are aged by (milliseconds); tests move it instead of sleeping. Default Date.now. */
  now?: () => number
  /** This process's index among its machine's workers (0 alone): its settler slot on the embedded database. */
  workerIndex?: number
}

export interface DataPlane extends Started {
  port: number
  /** Writes queued captures now (tests; SIGTERM drains through stop()). */
  flushCaptures(): Promise<void>
  /** Reads the settlement backlog into the x402 intake throttle now, not at its next tick (tests). */
  refreshSettlementThrottle(): Promise<void>
}

export async function startDataPlane(deps: DataPlaneDeps): Promise<DataPlane> {
  const { config, db, chain, chainInfo, logger } = deps
  const stops: Array<() => Promise<void> | void> = []
  const stop = async () => {
    for (const s of stops.splice(0).reverse()) await s()
  }
  try {
    const verified = createVerifiedTransferCache(config.caches)
    const usedProofs = createUsedProofCache(config.caches)
    // New x402 payloads are refused (503) while the settlement backlog would outrun their validity windows.
    const settlementThrottle = startThrottle(db, config, chain, logger)
    stops.push(async () => settlementThrottle.stop())
    // Read before the first request: a proof older than a stored retention horizon is refused from the start.
    const horizons = await startProofHorizons(db.sql, {
      refreshMs: config.retention.horizon_refresh_ms,
      logger,
    })
    stops.push(() => horizons.stop())
    const verifier = createVerifier(config, chain, verified, horizons, deps.now)
    const books = createBooksWriter(db, config, logger)
    stops.push(async () => {
      const lost = await books.drain(15_000)
      if (lost > 0) logger.error('captures not written at stop; those calls will be refunded', { lost })
    })
    // The ways to pay; stop writes what each holds in memory (batch-settlement's channel leases).
    const schemes = await SchemeRegistry.build(registeredSchemes(), {
      sql: db.sql,
      config,
      chain,
      chainInfo,
      logger,
      verifier,
      usedProofs,
      books,
      settlementThrottle,
      embedded: db.embedded,
      workerIndex: deps.workerIndex ?? 0,
    })
    stops.push(() => schemes.stop())
    const signer = receiptSigner(config)
    // Passes: the sign-in a pass endpoint's 402 declares and checks.
    const signIn = passSignIn(deps)
    const { endpoints, onEndpointChanged } = await startEndpointCache(deps, schemes, signer, signIn, stops)
    const dispatcher = createUpstreamDispatcher({
      allowPrivate: config.proxy.allow_private_upstreams,
      client: config.proxy.upstream_client,
    })
    stops.push(() => dispatcher.close())
    const watcher = await startTransferWatcher(deps, verified)
    stops.push(() => watcher.stop())
    const observed = new ObservedCalls(db.sql, logger).start(5_000)
    stops.push(() => observed.stop())
    const edge = createEdgeLimits(config)
    const identity = startIdentity(deps, stops)
    const { metered, pass, websocket } = paidRoutes(deps, {
      identity,
      endpoints,
      schemes,
      dispatcher,
      observed,
      signer,
      signIn,
      edge,
    })
    const checkout = deps.checkoutRoute(verifier, proofEdge(edge, edge.checkout))
    const reads = publicReads(deps, endpoints, signer)
    const app = createPublicApp({
      ...reads,
      bodyLimitBytes: config.server.body_limit_bytes,
      apiHandler: deps.apiHandler(onEndpointChanged),
      logger,
      dashboard: deps.dashboardRoute(),
      metered,
      websocket,
      pass,
      checkout,
      edge,
    })
    // Workers of one supervisor share the port on purpose (SO_REUSEPORT); anyone else already on it is refused.
    const listening = await listen(app, config.server.host, config.server.port, {
      allowSharedPort: workerEnv() !== null,
    })
    // Listening closes first on stop (stops run in reverse), then the writers drain.
    stops.push(() => listening.close())
    return {
      port: listening.port,
      flushCaptures: async () => {
        await books.drain()
        await schemes.flush()
        await observed.flush()
      },
      refreshSettlementThrottle: () => settlementThrottle.refresh(),
      readiness: schemes.readiness(),
      stop,
    }
  } catch (err) {
    await stop()
    throw err
  }
}

/** The sign-in of passes: bound to the public URL and the payment network, the published default age. */
function passSignIn(deps: DataPlaneDeps): SignIn {
  return new SignIn({
    publicUrl: deps.publicUrl,
    caip2: deps.chainInfo.caip2,
    maxAgeMs: SIGN_IN_MAX_AGE_MS,
    // Contract wallets (ERC-1271, ERC-6492) sign in too: asked on chain, only when recovery fails.
    verifyWallet: (q) =>
      verifyWalletMessage(deps.chain.publicClient, { ...q, timeoutMs: SIGN_IN_CHAIN_TIMEOUT_MS }),
  })
}

/** The paid routes: /m/* (the hot path) and /pass/* (buying a pass), over the same endpoints and schemes. */
function paidRoutes(
  deps: DataPlaneDeps,
  p: {
    endpoints: EndpointCache
    schemes: SchemeRegistry
    dispatcher: ReturnType<typeof createUpstreamDispatcher>
    observed: ObservedCalls
    signer: ReceiptSigner | undefined
    signIn: SignIn
    edge: ReturnType<typeof createEdgeLimits>
    identity: MeteredIdentity
  },
) {
  const { config, db, logger, chainInfo } = deps
  const { endpoints, schemes, signer, edge } = p
  // One for calls and sessions: a draw given back in the background is retried by the same queue.
  const passes = new PassUses(db.sql, p.signIn, logger, { settleForMs: 120_000 })
  const metered = createMeteredRoute({
    edge: proofEdge(edge, edge.unpaidMetered),
    endpoints,
    schemes,
    dispatcher: p.dispatcher,
    logger,
    observed: p.observed,
    receipts: signer === undefined ? undefined : { signer, network: chainInfo.caip2 },
    passes,
    replication: db.replication,
    identity: p.identity,
    paidAnswers: new PaidAnswers(db.sql, logger, {
      ttlMs: config.x402.paid_answers.ttl_ms,
      maxAnswerBytes: config.x402.paid_answers.max_answer_bytes,
      maxTotalBytes: config.x402.paid_answers.max_total_bytes,
    }),
    settings: {
      quoteTtlMs: config.proxy.quote_ttl_ms,
      maxBufferedBodyBytes: config.server.body_limit_bytes,
      heldAnswerMaxBytes: config.settlement.before_answer.held_answer_max_bytes,
    },
  })
  const pass = createPassPurchaseRoute({
    sql: db.sql,
    endpoints,
    schemes,
    logger,
    edge: proofEdge(edge, edge.unpaidMetered),
    replication: db.replication,
    settings: { quoteTtlMs: config.proxy.quote_ttl_ms, openWaitMs: 5_000 },
  })
  const websocket = createWebsocketBehavior({
    edge: proofEdge(edge, edge.unpaidMetered),
    endpoints,
    schemes,
    logger,
    replication: db.replication,
    passes,
    settings: {
      quoteTtlMs: config.proxy.quote_ttl_ms,
      // Well inside the claim's window, so its capture is written before the expiry job would refund it.
      maxSessionMs: Math.max(1_000, config.proxy.retry_window_ms - 30_000),
    },
  })
  return { metered, pass, websocket }
}

/**
 * Web Bot Auth: the configured keys, and the key directories fetched now and refreshed in the background
 * (never on the request path), stopped with the plane. Nonces are claimed in the shared database, grouped
 * (NonceClaims), and only for calls that are served.
 */
function startIdentity(deps: DataPlaneDeps, stops: Array<() => Promise<void> | void>): MeteredIdentity {
  const settings = identityFromConfig(deps.config.identity)
  const directories = settings.directories
  if (directories !== null) {
    void directories.refreshAll()
    stops.push(() => directories.stop())
  }
  const nonces = new NonceClaims(deps.db.sql)
  const claim = (q: NonceClaim) => nonces.claim(q)
  const verifierDeps = { directories, keys: settings.keys, policy: settings.policy }
  // The public URL may change at run time (settings); its scheme is parsed once per value, not per call.
  let publicUrl = ''
  let scheme = 'https'
  return {
    verify: (msg) => checkSignature(verifierDeps, msg),
    claim: (identity) => claimIdentityNonce(claim, identity),
    signerNames: new Set(settings.signerNames),
    scheme: () => {
      const now = deps.publicUrl()
      if (now !== publicUrl) {
        publicUrl = now
        scheme = new URL(now).protocol.slice(0, -1)
      }
      return scheme
    },
  }
}

/** The endpoint cache, invalidated across workers and instances (an API change, a kept MCP tool catalog). */
async function startEndpointCache(
  deps: DataPlaneDeps,
  schemes: SchemeRegistry,
  signer: ReceiptSigner | undefined,
  signIn: SignIn,
  stops: Array<() => Promise<void> | void>,
) {
  // A kept tool catalog changes the endpoint: bound once the invalidation exists (it needs the cache).
  let changed: (id: string) => unknown = () => {}
  const toolCatalogs = new ToolCatalogs(deps.db.sql, deps.logger, (id) => changed(id))
  const endpoints = createEndpointCache(deps.db.sql, {
    ...endpointCacheOptions(deps, schemes, signer),
    toolCatalogs,
    signIn,
  })
  const onEndpointChanged = await invalidateAcrossInstances(deps.db, endpoints, stops)
  changed = onEndpointChanged
  return { endpoints, onEndpointChanged }
}

function endpointCacheOptions(
  deps: DataPlaneDeps,
  schemes: SchemeRegistry,
  signer: ReceiptSigner | undefined,
): EndpointCacheOptions {
  const { config } = deps
  return {
    signer,
    offerValiditySeconds: Math.ceil(config.proxy.quote_ttl_ms / 1000),
    max: config.caches.endpoints_max,
    offers: (q) => schemes.offers(q),
    publicUrl: deps.publicUrl,
    defaultTimeoutMs: config.proxy.upstream_timeout_ms,
    allowPrivate: config.proxy.allow_private_upstreams,
    maxTimeoutSeconds: config.x402.max_timeout_seconds,
    settleBeforeAnswerByDefault: config.settlement.before_answer.enabled,
  }
}

/** The public read routes beside the paid path: receipts, their signing keys, the discovery listing. */
function publicReads(deps: DataPlaneDeps, endpoints: EndpointCache, signer: ReceiptSigner | undefined) {
  const { db, logger, chainInfo } = deps
  return {
    receipts: createReceiptRoute({
      sql: db.sql,
      logger,
      // Cached a second by the client and shared by concurrent reads: one RPC per second at most.
      headBlock: () => deps.chain.publicClient.getBlockNumber({ cacheTime: 1_000 }),
      signing:
        signer === undefined ? undefined : { signer, network: chainInfo.caip2, publicUrl: deps.publicUrl },
    }),
    receiptKeys: signer === undefined ? undefined : createReceiptKeysRoute(signer),
    discovery: createDiscoveryRoutes({
      sql: db.sql,
      endpoints,
      logger,
      publicUrl: deps.publicUrl,
      networks: [chainInfo.network, chainInfo.x402Network, chainInfo.caip2],
      cacheTtlMs: 5_000,
    }),
  }
}

/**
 * The key that signs offers and receipts: RECEIPT_SIGNING_KEY, or on the local dev chain a fixed, public dev
 * key (like anvil's accounts: every instance and worker signs alike, and nobody should trust it). Elsewhere
 * without a key, offers and receipts go unsigned.
 */
function receiptSigner(config: DataPlaneDeps['config']): ReceiptSigner | undefined {
  const key =
    config.secrets.receipt_signing_key ?? (config.chain.network === 'local' ? LOCAL_RECEIPT_KEY : null)
  if (key === null) return undefined
  return new ReceiptSigner({ privateKey: key, previous: config.secrets.receipt_previous_signers })
}
/** How old a sign-in message may be: the published helpers' default (5 minutes), and its 402's expiry. */
const SIGN_IN_MAX_AGE_MS = 5 * 60_000
/** A contract wallet's sign-in waits at most this for the chain's answer; then 503 verification_unavailable. */
const SIGN_IN_CHAIN_TIMEOUT_MS = 3_000

/** keccak256("tollgate local receipt key"): the local chain's dev signing key, public on purpose. */
const LOCAL_RECEIPT_KEY = keccak256(toHex('tollgate local receipt key'))

/**
 * An endpoint change drops the cached copy here, in sibling workers (one parent relays it, and the API call
 * answers once they have) and in other instances (NOTIFY on a server). Returns what the API calls on change.
 */
async function invalidateAcrossInstances(
  db: Database,
  endpoints: ReturnType<typeof createEndpointCache>,
  stops: Array<() => Promise<void> | void>,
): Promise<(id: string) => Promise<void> | undefined> {
  const relay = startEndpointRelay((id) => endpoints.delete(id))
  if (relay) stops.push(() => relay.stop())
  const onEndpointChanged = (id: string): Promise<void> | undefined => {
    endpoints.delete(id)
    return relay?.announce(id)
  }
  if (!db.embedded) stops.push(await listenForEndpointChanges(db.sql, onEndpointChanged))
  return onEndpointChanged
}

/**
 * Watches the treasury from where the last run stopped: each confirmed transfer pre-verifies its hash (a
 * metered call then needs no RPC), and plain transfers are matched to payments by their amount.
 */
async function startTransferWatcher(
  deps: DataPlaneDeps,
  verified: ReturnType<typeof createVerifiedTransferCache>,
): Promise<TransferWatcher> {
  const { config, db, chain, logger } = deps
  const cursorName = `treasury-transfers:${chain.treasury.toLowerCase()}`
  const watcherFrom = await loadWatcherCursor(db.sql, cursorName)
  return watchTreasuryTransfers(chain.publicClient, {
    ...(watcherFrom !== null ? { fromBlock: watcherFrom } : {}),
    onProgress: (next) => saveWatcherCursor(db.sql, cursorName, next),
    usdc: chain.usdc.address,
    treasury: chain.treasury,
    confirmations: config.chain.confirmations,
    pollIntervalMs: config.chain.poll_interval_ms,
    // tollgate's own settlements, and transfers an authorization made, are not remembered as verified:
    // presented as a hash, they are refused.
    onTransfer: (t) => {
      if (proofRefusal(chain, t) === null) verified.set(t.hash, t)
    },
    // A failure rescans the range.
    onTransfers: (transfers) => deps.attributeTransfers(transfers),
    onError: (err) => logger.warn('transfer watcher poll failed', { err }),
  })
}

/**
 * Why a mined transfer to the treasury pays nothing as a transaction-hash proof (null: it may). A settlement
 * of tollgate's (anyone can read its hash on chain) carries money already the payments' it settled
 * (src/chain/own-transactions.ts); a transfer an EIP-3009 authorization made is that authorization's money,
 * paid (or to be paid) as x402 or MPP by its nonce: its payer could be served by the authorization, submit
 * it themselves before tollgate settles it, and present the hash for a second call, and anyone can copy an
 * authorization from a pending settlement and do the same with the payer's money.
 */
function proofRefusal(
  chain: ChainContext,
  t: Pick<TreasuryTransfer, 'sender' | 'from' | 'authorizations'>,
): 'own_settlement' | 'authorization_transfer' | null {
  if (isOwnMoney(t, chain.ownSenders())) return 'own_settlement'
  return t.authorizations.length > 0 ? 'authorization_transfer' : null
}

function createVerifier(
  config: Config,
  chain: ChainContext,
  verified: ReturnType<typeof createVerifiedTransferCache>,
  horizons: ProofHorizons,
  now: (() => number) | undefined,
): Verifier {
  // One per process: the checks of one payer share its balance read (see check-authorization.ts).
  const checkOnChain = createAuthorizationChainChecker(chain.tokenReads, {
    balanceTtlMs: config.x402.balance_ttl_ms,
  })
  return new Verifier({
    ...(now ? { now } : {}),
    verified,
    maxProofAgeMs: config.chain.max_proof_age_ms,
    notFoundTtlMs: config.verify.not_found_ttl_ms,
    lookupsPerClient: config.rate_limits.enabled ? config.rate_limits.chain_lookups_per_client : 0,
    horizons,
    x402: {
      // v1 clients name the network, v2 clients give its CAIP-2 id.
      networks: [chain.x402Network, chain.caip2],
      chainId: chain.chainId,
      treasury: chain.treasury,
      usdc: { address: chain.usdc.address, name: chain.usdc.name, version: chain.usdc.version },
    },
    checkAuthorization: async (q) => {
      const end = rpcDuration.startTimer()
      try {
        return await checkOnChain(q)
      } finally {
        end()
      }
    },
    forgetBalance: (payer) => checkOnChain.forget(payer),
    verifySmartWallet: smartWalletVerifier(
      chain.publicClient,
      { usdc: chain.usdc, chainId: chain.chainId },
      counterfactualWallets(chain.publicClient, config.x402.eip6492_factories),
    ),
    simulate: (q) =>
      simulateTransferAuthorization(chain.publicClient, {
        usdc: chain.usdc.address,
        treasury: chain.treasury,
        ...q,
      }),
    simulateFromAtomic:
      config.x402.simulate_min_price === null ? null : configDollars(config.x402.simulate_min_price),
    lookupTransfer: async (hash) => {
      const end = rpcDuration.startTimer()
      try {
        const found = await verifyTransfer(chain.publicClient, {
          hash,
          usdc: chain.usdc.address,
          treasury: chain.treasury,
          confirmations: config.chain.confirmations,
          maxAgeMs: config.chain.max_proof_age_ms,
          waitMs: config.verify.wait_ms,
          unseenWaitMs: config.verify.unseen_wait_ms,
        })
        const refused = found.ok ? proofRefusal(chain, found.transfer) : null
        return refused === null ? found : { ok: false, reason: refused }
      } finally {
        end()
      }
    },
  })
}

function startThrottle(db: Database, config: Config, chain: ChainContext, logger: Logger) {
  return startSettlementThrottle(() => readBacklog(db.sql), {
    halted: () => chain.tokenReads.halted(chain.treasury),
    maxBacklogCount: config.settlement.throttle_backlog_count,
    maxOldestS: config.settlement.throttle_oldest_s,
    retryAfterS: config.settlement.throttle_retry_after_s,
    checkMs: config.settlement.throttle_check_ms,
    logger,
  })
}

function createBooksWriter(db: Database, config: Config, logger: Logger): BatchWriter {
  // One write in flight: while it runs, the next batch fills (group commit). Measured on a PostgreSQL
  // server: 22k claims/s at p50 0.9 ms with one in flight, 10.6k/s at p50 2.2 ms with five. Claims and
  // captures share each statement (one commit per batch) on the books pool, with synchronous commit:
  // a capture is durable once written, and retried until it is.
  return new BatchWriter(db.books, {
    batchMax: config.claims.batch_max,
    concurrency: 1,
    flushIntervalMs: config.claims.capture_flush_ms,
    claimTimeoutMs: config.claims.timeout_ms,
    onAbandonedRelease: (ok, err) => {
      if (!ok) logger.warn('a claim won after its call gave up could not be released', { err })
    },
    onBatch: (claimCount, captureCount) => {
      booksWrites.inc()
      if (claimCount > 0) claimBatchSize.observe(claimCount)
      if (captureCount > 0) captureBatchSize.observe(captureCount)
    },
    onWritten: (ms) => booksWriteDuration.observe(ms / 1000),
    onQueue: (n) => captureQueue.set(n),
    onError: (err, waiting) => {
      if (waiting > 0) captureRetries.inc()
      logger.error('claim/capture batch failed; its captures are queued again and retried', { err, waiting })
    },
    onUnacknowledgedReleased: (released, checked) => {
      if (released > 0)
        logger.warn('claims written without an answer were released for a retry', { released, checked })
    },
    onNotApplied: (c) =>
      logger.warn('captures found their claims no longer open (already written)', { count: c.length }),
  })
}
