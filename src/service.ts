// Wiring only: database → chain → public app (data plane + control-plane API) → background jobs → admin port.
// Each subsystem starts with start(deps) and returns how to stop it, check it and mount its admin routes.
// main.ts runs this from the command line (once per worker process); tests run it in-process.

import type { Address } from 'viem'
import { PaymentCreator } from './books/payment-creations.ts'
import { createAuthorizationChainChecker } from './chain/check-authorization.ts'
import type { ChainContext } from './chain/connect.ts'
import { type ChainInfo, describeChain } from './chain/info.ts'
import { startChain } from './chain/start.ts'
import { createUptoChainChecker } from './chain/upto-permit.ts'
import { uptoFacilitatorOf } from './chain/upto-settle.ts'
import {
  counterfactualWallets,
  smartWalletVerifier,
  walletDigestVerifier,
} from './chain/verify-smart-wallet.ts'
import { attributeTransfers } from './checkout/attribution.ts'
import { createCheckoutRoute } from './checkout/route.ts'
import { publicBaseUrl } from './config/load.ts'
import type { Config } from './config/schema.ts'
import type { FacilitatorDeps } from './control-plane/deps.ts'
import { startFacilitatorSettler } from './control-plane/facilitator-settler.ts'
import { FacilitatorWaits } from './control-plane/facilitator-waits.ts'
import { createApiHandler } from './control-plane/handler.ts'
import type { JobRunner } from './control-plane/jobs/runner.ts'
import { startBackground } from './control-plane/jobs/start.ts'
import { createKeyCache } from './control-plane/key-cache.ts'
import { createDashboardRoute } from './dashboard/route.ts'
import { type DataPlaneDeps, startDataPlane } from './data-plane/start.ts'
import { assertNativeUws } from './data-plane/uws.ts'
import { bindDatabaseToChain } from './db/chain-binding.ts'
import type { Sql } from './db/sql.ts'
import { type Database, startDatabase } from './db/start.ts'
import { startAdminServer } from './observability/admin.ts'
import { createLogger, type Logger } from './observability/logger.ts'
import { countRpcRequest } from './observability/metrics.ts'
import { startTracing } from './observability/tracing.ts'
import { createRateLimiter } from './rate-limit.ts'
import { MppBinding } from './schemes/mpp-charge/binding.ts'
import { StartedList } from './subsystem.ts'

export interface Service {
  config: Config
  sql: Sql
  chain: ChainContext
  logger: Logger
  /** Public base URL (payment_url and metered_url are built on it). */
  url: string
  port: number
  adminPort: number
  databaseUrl: string
  jobs: JobRunner
  /** Writes queued captures now (tests; SIGTERM drains through stop()). */
  flushCaptures(): Promise<void>
  /** Reads the settlement backlog into the x402 intake throttle now, not at its next tick (tests). */
  refreshSettlementThrottle(): Promise<void>
  stop(): Promise<void>
}

export interface StartOptions {
  logger?: Logger
  /** A worker process: the parent's database (embedded or not), whether it runs the jobs, its admin port. */
  worker?: { databaseUrl: string; embedded: boolean; runJobs: boolean; adminPort: number; index: number }
  /** The clock proofs are aged by (tests move it instead of sleeping). Default Date.now. */
  now?: () => number
}

export async function startService(config: Config, options: StartOptions = {}): Promise<Service> {
  // Before anything else: a silent fallback to the JS server would run everything slow.
  assertNativeUws()
  const logger = options.logger ?? createLogger(config.log)
  const started = new StartedList((err) => logger.warn('shutdown step failed', { err }))
  let baseUrl = ''
  const publicUrl = () => baseUrl
  try {
    // Only with an endpoint is the OpenTelemetry SDK imported at all (see observability/tracing.ts).
    if (config.tracing.otlp_endpoint) {
      const traces = await startTracing({
        otlpEndpoint: config.tracing.otlp_endpoint,
        serviceName: config.tracing.service_name,
        sampleRatio: config.tracing.sample_ratio,
        exportIntervalMs: config.tracing.export_interval_ms,
      })
      started.add({ stop: () => traces.stop() })
    }
    const db = started.add(
      await startDatabase({
        config,
        logger,
        url: options.worker?.databaseUrl,
        embedded: options.worker?.embedded,
      }),
    )
    const { chain } = started.add(await startChain({ config, logger, onRpcRequest: countRpcRequest }))
    // A database made on one chain refuses another (a fresh dev chain reproduces old transaction hashes).
    const genesis = await chain.publicClient.getBlock({ blockNumber: 0n })
    await bindDatabaseToChain(db.sql, {
      chainId: chain.chainId,
      usdcAddress: chain.usdc.address,
      genesisHash: genesis.hash,
    })
    const chainInfo = describeChain(chain)
    const facilitator: FacilitatorDeps = { settler: null, waits: new FacilitatorWaits(db.sql) }
    const dataPlane = started.add(
      await startDataPlane({
        config,
        db,
        chain,
        chainInfo,
        logger,
        publicUrl,
        now: options.now,
        workerIndex: options.worker?.index ?? 0,
        ...handedOver({
          facilitator,
          config,
          sql: db.sql,
          replication: db.replication,
          chain,
          chainInfo,
          logger,
          publicUrl,
        }),
      }),
    )
    baseUrl = publicBaseUrl(config, dataPlane.port)
    started.add(await startFacilitator(facilitator, { config, db, chain, logger, worker: options.worker }))
    const background = started.add(
      await startBackground({
        sql: db.sql,
        config,
        logger,
        chain,
        embedded: db.embedded,
        publicUrl,
        runJobs: options.worker?.runJobs,
      }),
    )
    const admin = await startAdminServer({
      host: config.admin.host,
      port: options.worker?.adminPort ?? config.server.admin_port,
      token: config.secrets.admin_token,
      routeLimiter: createRateLimiter('admin', config.rate_limits, config.rate_limits.admin_reconcile),
      logger,
      checks: started.readiness(),
      routes: started.adminRoutes(),
    })
    started.add({ stop: () => admin.close() })
    return {
      config,
      sql: db.sql,
      chain,
      logger,
      url: baseUrl,
      port: dataPlane.port,
      adminPort: admin.port,
      databaseUrl: db.url,
      jobs: background.jobs,
      flushCaptures: () => dataPlane.flushCaptures(),
      refreshSettlementThrottle: () => dataPlane.refreshSettlementThrottle(),
      stop: () => started.stop(),
    }
  } catch (err) {
    await started.stop()
    throw err
  }
}

/**
 * The routes beside the metered one and the transfer attribution, built here and handed to the data plane
 * (as the control plane's API handler is): the data plane imports neither checkout nor the control plane.
 */
function handedOver(deps: {
  facilitator: FacilitatorDeps
  config: Config
  sql: Sql
  replication: Database['replication']
  chain: ChainContext
  chainInfo: ChainInfo
  logger: Logger
  publicUrl: () => string
}): Pick<DataPlaneDeps, 'apiHandler' | 'checkoutRoute' | 'dashboardRoute' | 'attributeTransfers'> {
  const { config, sql, replication, chain, chainInfo, logger, publicUrl } = deps
  // The facilitator's own nonce and balance reads (not shared with the hot path's), a payer's balance read
  // reused for x402.balance_ttl_ms as the data plane's is: the claim's reservation keeps it exact.
  const checkAuthorization = createAuthorizationChainChecker(chain.tokenReads, {
    balanceTtlMs: config.x402.balance_ttl_ms,
  })
  // Read on first use and kept; a failed read is asked again next time.
  let uptoAt: Promise<Address | null> | null = null
  const upto = {
    facilitator: (): Promise<Address | null> => {
      uptoAt ??= uptoFacilitatorOf(chain.publicClient, {
        chainId: chainInfo.chainId,
        settler: chainInfo.treasury,
      }).catch(() => {
        uptoAt = null
        return null
      })
      return uptoAt
    },
    check: createUptoChainChecker(chain.tokenReads),
  }
  return {
    apiHandler: (onEndpointChanged) =>
      createApiHandler({
        config,
        sql,
        chain: chainInfo,
        logger,
        publicUrl,
        onEndpointChanged,
        keys: createKeyCache({ max: config.caches.api_keys_max, ttlMs: config.caches.api_keys_ttl_ms }),
        paymentCreator: new PaymentCreator(sql, {
          batchMax: config.payments.create_batch_max,
          concurrency: config.payments.create_concurrency,
        }),
        checkAuthorization,
        // A smart-wallet payer's signature, asked of the wallet as the data plane's verifier asks it.
        verifySmartWallet: smartWalletVerifier(
          chain.publicClient,
          { usdc: chain.usdc, chainId: chain.chainId },
          counterfactualWallets(chain.publicClient, config.x402.eip6492_factories),
        ),
        verifyWalletDigest: walletDigestVerifier(chain.publicClient),
        upto,
        facilitator: deps.facilitator,
      }),
    checkoutRoute: (verifier, edge) =>
      createCheckoutRoute({
        sql,
        verifier,
        chain: chainInfo,
        publicUrl,
        logger,
        settings: { ownerShareBps: config.fees.owner_share_bps, x402SettleWaitMs: config.verify.wait_ms },
        replication,
        edge,
        mpp: new MppBinding({
          secrets: config.secrets,
          publicUrl: config.server?.public_url,
          chainInfo,
          logger,
          purpose: 'checkout',
        }),
      }),
    dashboardRoute: () => createDashboardRoute(),
    // Plain transfers to the treasury matched to checkout payments by their amount; tollgate's own settlements
    // (sent from the treasury or a settler slot) left out.
    attributeTransfers: async (transfers) => {
      await attributeTransfers(
        {
          sql,
          view: () => ({
            publicUrl: publicUrl(),
            network: chainInfo.network,
            chainId: chainInfo.chainId,
            treasury: chainInfo.treasury,
            usdcAddress: chainInfo.usdcAddress,
          }),
          ownerShareBps: config.fees.owner_share_bps,
          logger,
          ownSenders: chain.ownSenders,
          chainId: chainInfo.chainId,
          usdc: chainInfo.usdcAddress,
        },
        transfers,
      )
    },
  }
}

/**
 * The facilitator's settlement group commit, when this process gets a settler slot of its own: started once
 * the data plane holds its settler slot (the facilitator's is another).
 */
async function startFacilitator(
  into: FacilitatorDeps,
  deps: { config: Config; db: Database; chain: ChainContext; logger: Logger; worker: StartOptions['worker'] },
): Promise<{ stop(): Promise<void> }> {
  const { db, worker, ...rest } = deps
  const started = await startFacilitatorSettler({
    ...rest,
    sql: db.sql,
    embedded: db.embedded,
    workerIndex: worker?.index ?? 0,
  })
  if (started.settler) started.settler.onSettled = () => into.waits.wake()
  into.settler = started.settler
  return {
    stop: async () => {
      into.settler = null
      await started.stop()
    },
  }
}
