// Starts a real tollgate in this process: real database (fresh server database or embedded PGlite), the
// shared anvil chain, real ports on 127.0.0.1. Each service gets its own treasury so tests stay apart.
import { inject } from 'vitest'
import { type DeepPartial, loadConfig } from '../../src/config/load.ts'
import type { Settings } from '../../src/config/schema.ts'
import { createLogger, type Logger } from '../../src/observability/logger.ts'
import { type Service, startService } from '../../src/service.ts'
import { type Funded, fundedAccount } from './accounts.ts'
import { type ApiInit, type ApiResult, callApi } from './api.ts'
import { freshDatabaseUrl } from './database.ts'

export { type ApiInit, type ApiResult, callApi }

export interface TestService extends Service {
  treasury: Funded
  api(path: string, init?: ApiInit): Promise<ApiResult>
}

export interface TestServiceOptions {
  overrides?: DeepPartial<Settings>
  /** The clock the service ages proofs by: a test moves it forward instead of sleeping. */
  now?: () => number
  /** Share a database with another instance (a server URL); default: a fresh one. */
  databaseUrl?: string | null
  /** Share a treasury with another instance. */
  treasury?: Funded
  /** Where the service logs (tests that read log lines pass a captured one). */
  logger?: Logger
  /** ADMIN_TOKEN: turns the admin port's operator routes (/reconcile, …) on. */
  adminToken?: string
  /** The chain's RPC URL (a counting proxy in front of the test chain); default the chain itself. */
  rpcUrl?: string
}

export async function startTestService(options: TestServiceOptions = {}): Promise<TestService> {
  const databaseUrl = options.databaseUrl === undefined ? await freshDatabaseUrl() : options.databaseUrl
  const treasury = options.treasury ?? (await fundedAccount(0n))
  const config = loadConfig({
    env: {
      NODE_ENV: 'test',
      RPC_URL: options.rpcUrl ?? inject('rpcUrl'),
      USDC_ADDRESS: inject('usdcAddress'),
      TREASURY_PRIVATE_KEY: treasury.privateKey,
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
      ...(options.adminToken ? { ADMIN_TOKEN: options.adminToken } : {}),
    },
    overrides: {
      database: { data_dir: 'memory://' },
      ...options.overrides,
    } as DeepPartial<Settings>,
  })
  const service = await startService(config, {
    logger: options.logger ?? createLogger(config.log),
    ...(options.now ? { now: options.now } : {}),
  })
  return Object.assign(service, {
    treasury,
    api: (path: string, init: ApiInit = {}) => callApi(service.url, path, init),
  })
}

/** Registers a merchant and returns its key and account. */
export async function registerMerchant(service: TestService, wallet?: string) {
  const w = wallet ?? (await fundedAccount(0n)).address
  const r = await service.api('/api/v1/register', { body: { wallet_address: w, business_name: 'Acme Data' } })
  if (r.status !== 201) throw new Error(`register failed: ${r.status} ${r.text}`)
  return { key: r.body.api_key as string, account: r.body.account, wallet: w }
}
