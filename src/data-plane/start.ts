// The data plane's start(deps): hot-path state (caches, the one verifier, the group-commit writers, the
// upstream pool, the transfer watcher), the public uWS app on its port, and how to drain it all.

import { BatchWriter } from '../books/batch-writer.ts'
import { createAuthorizationChainChecker } from '../chain/check-authorization.ts'
import type { ChainContext } from '../chain/connect.ts'
import { simulateTransferAuthorization } from '../chain/simulate-authorization.ts'
import { verifySmartWalletAuthorization } from '../chain/verify-smart-wallet.ts'
import { verifyTransfer } from '../chain/verify-transfer.ts'
import { type TransferWatcher, watchTreasuryTransfers } from '../chain/watcher.ts'
import { attributeTransfers } from '../checkout/attribution.ts'
import { createCheckoutRoute } from '../checkout/route.ts'
import type { Config } from '../config/schema.ts'
import type { ChainInfo } from '../control-plane/deps.ts'
import { listenForEndpointChanges } from '../db/notify.ts'
import { loadWatcherCursor, saveWatcherCursor } from '../db/payments.ts'
import type { Database } from '../db/start.ts'
import type { ApiHandler } from '../http-exchange.ts'
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
import { registeredSchemes } from '../schemes/index.ts'
import { SchemeRegistry } from '../schemes/registry.ts'
import type { Started } from '../subsystem.ts'
import { createEdgeLimits, createPublicApp, listen } from './app.ts'
import { createUsedProofCache, createVerifiedTransferCache } from './caches.ts'
import { createEndpointCache } from './endpoint-cache.ts'
import { createMeteredRoute } from './metered.ts'
import { createUpstreamDispatcher } from './proxy.ts'
import { createReceiptRoute } from './receipts.ts'
import { startSettlementThrottle } from './settlement-throttle.ts'
import { Verifier } from './verifier.ts'
import { workerEnv } from './workers.ts'

export interface DataPlaneDeps {
  config: Config
  db: Database
  chain: ChainContext
  chainInfo: ChainInfo
  logger: Logger
  publicUrl(): string
  /** The control plane's /api/v1 handler, given this plane's cache invalidation (the planes never import each other). */
  apiHandler(onEndpointChanged: (id: string) => void): ApiHandler
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
    const settlementThrottle = startThrottle(db, config, logger)
    stops.push(async () => settlementThrottle.stop())
    const verifier = createVerifier(config, chain, verified)
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
    })
    stops.push(() => schemes.stop())
    const endpoints = createEndpointCache(db.sql, {
      max: config.caches.endpoints_max,
      offers: (q) => schemes.offers(q),
      publicUrl: deps.publicUrl,
      defaultTimeoutMs: config.proxy.upstream_timeout_ms,
      allowPrivate: config.proxy.allow_private_upstreams,
      maxTimeoutSeconds: config.x402.max_timeout_seconds,
    })
    const onEndpointChanged = (id: string) => {
      endpoints.delete(id)
    }
    if (!db.embedded) stops.push(await listenForEndpointChanges(db.sql, onEndpointChanged))
    const dispatcher = createUpstreamDispatcher({ allowPrivate: config.proxy.allow_private_upstreams })
    stops.push(() => dispatcher.close())
    const watcher = await startTransferWatcher(deps, verified)
    stops.push(() => watcher.stop())

    const metered = createMeteredRoute({
      endpoints,
      schemes,
      dispatcher,
      logger,
      settings: {
        quoteTtlMs: config.proxy.quote_ttl_ms,
        maxBufferedBodyBytes: config.server.body_limit_bytes,
      },
    })
    const checkout = createCheckoutRoute({
      sql: db.sql,
      verifier,
      chain: chainInfo,
      publicUrl: deps.publicUrl,
      logger,
      settings: { ownerShareBps: config.fees.owner_share_bps },
    })
    const app = createPublicApp({
      receipts: createReceiptRoute({ sql: db.sql, logger }),
      bodyLimitBytes: config.server.body_limit_bytes,
      apiHandler: deps.apiHandler(onEndpointChanged),
      logger,
      metered,
      checkout,
      edge: createEdgeLimits(config),
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
      },
      refreshSettlementThrottle: () => settlementThrottle.refresh(),
      stop,
    }
  } catch (err) {
    await stop()
    throw err
  }
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
  const paymentView = () => ({
    publicUrl: deps.publicUrl(),
    network: deps.chainInfo.network,
    chainId: deps.chainInfo.chainId,
    treasury: deps.chainInfo.treasury,
    usdcAddress: deps.chainInfo.usdcAddress,
  })
  const cursorName = `treasury-transfers:${chain.treasury.toLowerCase()}`
  const watcherFrom = await loadWatcherCursor(db.sql, cursorName)
  return watchTreasuryTransfers(chain.publicClient, {
    ...(watcherFrom !== null ? { fromBlock: watcherFrom } : {}),
    onProgress: (next) => saveWatcherCursor(db.sql, cursorName, next),
    usdc: chain.usdc.address,
    treasury: chain.treasury,
    confirmations: config.chain.confirmations,
    pollIntervalMs: config.chain.poll_interval_ms,
    onTransfer: (t) => {
      verified.set(t.hash, t)
    },
    // Plain transfers matched to payments by their amount (a transfer sent without a hash still pays); a failure rescans the range.
    onTransfers: async (transfers) => {
      await attributeTransfers(
        { sql: db.sql, view: paymentView, ownerShareBps: config.fees.owner_share_bps, logger },
        transfers,
      )
    },
    onError: (err) => logger.warn('transfer watcher poll failed', { err }),
  })
}

function createVerifier(
  config: Config,
  chain: ChainContext,
  verified: ReturnType<typeof createVerifiedTransferCache>,
): Verifier {
  // One per process: the checks of one payer share its balance read (see check-authorization.ts).
  const checkOnChain = createAuthorizationChainChecker(chain.tokenReads)
  return new Verifier({
    verified,
    maxProofAgeMs: config.chain.max_proof_age_ms,
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
    verifySmartWallet: (q) =>
      verifySmartWalletAuthorization(chain.publicClient, { usdc: chain.usdc, chainId: chain.chainId, ...q }),
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
        return await verifyTransfer(chain.publicClient, {
          hash,
          usdc: chain.usdc.address,
          treasury: chain.treasury,
          confirmations: config.chain.confirmations,
          maxAgeMs: config.chain.max_proof_age_ms,
          waitMs: config.verify.wait_ms,
        })
      } finally {
        end()
      }
    },
  })
}

function startThrottle(db: Database, config: Config, logger: Logger) {
  return startSettlementThrottle(db.sql, {
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
  // captures share each statement (one commit per batch) on the main pool, with synchronous commit:
  // a capture is durable once written, and retried until it is.
  return new BatchWriter(db.sql, {
    batchMax: config.claims.batch_max,
    concurrency: 1,
    flushIntervalMs: config.claims.capture_flush_ms,
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
    onNotApplied: (c) =>
      logger.warn('captures found their claims no longer open (already written)', { count: c.length }),
  })
}
