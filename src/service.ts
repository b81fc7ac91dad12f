// Wiring only: config → database + migrations → chain → caches → public app → jobs → admin port.
// main.ts runs this from the command line; tests run it in-process (several instances on one database).
import { type ChainContext, connectChain } from './chain/connect.ts'
import { publicBaseUrl } from './config/load.ts'
import type { Config } from './config/schema.ts'
import type { ChainInfo } from './control-plane/deps.ts'
import { createApiHandler } from './control-plane/handler.ts'
import { createPublicApp, type Listening, listen } from './data-plane/app.ts'
import { type EmbeddedDatabase, startEmbeddedDatabase } from './db/embedded.ts'
import { migrate } from './db/migrate.ts'
import { createSql, type Sql } from './db/sql.ts'
import { type AdminServer, startAdminServer } from './observability/admin.ts'
import { createLogger, type Logger } from './observability/logger.ts'
import { dbPoolSize } from './observability/metrics.ts'

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
  stop(): Promise<void>
}

export interface StartOptions {
  logger?: Logger
}

export async function startService(config: Config, options: StartOptions = {}): Promise<Service> {
  const logger = options.logger ?? createLogger(config.log.level)
  const cleanups: Array<() => Promise<void> | void> = []
  const stop = async () => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      try {
        await cleanup()
      } catch (err) {
        logger.warn('shutdown step failed', { err })
      }
    }
  }
  try {
    let databaseUrl = config.database.url
    let embedded: EmbeddedDatabase | null = null
    if (!databaseUrl) {
      embedded = await startEmbeddedDatabase({ dataDir: config.database.data_dir })
      cleanups.push(() => embedded!.stop())
      databaseUrl = embedded.url
    }
    // The embedded database is one session: one connection is the only safe pool size there.
    const poolMax = embedded ? 1 : config.database.pool_max
    const sql = createSql(databaseUrl, { max: poolMax })
    cleanups.push(() => sql.end({ timeout: 5 }))
    dbPoolSize.set(poolMax)
    const migrated = await migrate(sql)
    if (migrated.applied.length) logger.info('migrations applied', { applied: migrated.applied })

    const chain = await connectChain(config, { logger })
    cleanups.push(() => chain.close())
    const chainInfo: ChainInfo = {
      network: chain.network,
      chainId: chain.chainId,
      x402Network: chain.x402Network,
      caip2: chain.caip2,
      treasury: chain.treasury,
      usdcAddress: chain.usdc.address,
      usdcName: chain.usdc.name,
      usdcVersion: chain.usdc.version,
      explorerUrl: chain.explorerUrl,
    }

    let baseUrl = ''
    const apiHandler = createApiHandler({
      config,
      sql,
      chain: chainInfo,
      logger,
      publicUrl: () => baseUrl,
      onEndpointChanged: () => {},
    })
    const app = createPublicApp({ bodyLimitBytes: config.server.body_limit_bytes, apiHandler })
    const listening: Listening = await listen(app, config.server.host, config.server.port)
    cleanups.push(() => listening.close())
    baseUrl = publicBaseUrl(config, listening.port)

    const admin: AdminServer = await startAdminServer({
      host: config.server.host,
      port: config.server.admin_port,
      logger,
      checks: [
        {
          name: 'database',
          check: async () => {
            await sql`SELECT 1`
            return { ok: true }
          },
        },
        {
          name: 'chain',
          check: async () => {
            const block = await chain.publicClient.getBlockNumber({ cacheTime: 0 })
            return { ok: true, detail: `block ${block}` }
          },
        },
      ],
    })
    cleanups.push(() => admin.close())

    return {
      config,
      sql,
      chain,
      logger,
      url: baseUrl,
      port: listening.port,
      adminPort: admin.port,
      databaseUrl,
      stop,
    }
  } catch (err) {
    await stop()
    throw err
  }
}
