// Command-line entry: load the configuration, then either run one service in this process or (workers > 1)
// supervise N worker processes on one port; print where it listens, drain on SIGTERM.
import { randomBytes } from 'node:crypto'
import { devChainFilePath, removeDevChainFile, writeDevChainFile } from './cli/dev-chain-file.ts'
import { ConfigError, loadConfig } from './config/load.ts'
import type { Config } from './config/schema.ts'
import { workerCount } from './config/worker-count.ts'
import { startSupervisor, workerEnv } from './data-plane/workers.ts'
import { configDollars, formatDollars } from './money.ts'
import { createLogger } from './observability/logger.ts'
import { answerParentMetrics } from './observability/metrics.ts'
import { installProcessHandlers } from './observability/process-handlers.ts'
import { type Service, startService } from './service.ts'

async function main(): Promise<void> {
  let config: Config
  try {
    config = loadConfig()
    if (config.chain.network === 'local' && !config.secrets.admin_token && !workerEnv()) {
      // The local dev chain only: a token for this run's admin routes, handed to `npm run reconcile` through
      // .data/dev-chain.json (a file beside the data it guards). Elsewhere ADMIN_TOKEN stays an explicit choice.
      process.env.ADMIN_TOKEN = randomBytes(24).toString('hex')
      config = loadConfig()
    }
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`tollgate: ${err.message}\n`)
      process.exit(78) // EX_CONFIG
    }
    throw err
  }
  // Before anything can fail asynchronously: whatever escapes is logged with context.
  installProcessHandlers(createLogger(config.log.level))
  const worker = workerEnv()
  if (worker) return runWorker(config, worker)
  const count = workerCount(config)
  if (count > 1) return runSupervisor(config, count)
  const service = await startService(config)
  if (service.chain.devChain) writeDevChain(config, service)
  process.stdout.write(`${banner(config, service).join('\n')}\n\n`)
  onSignals(config, service.logger, () => {
    if (service.chain.devChain) removeDevChainFile()
    return service.stop()
  })
}

/** For npm run pay / reconcile: the dev chain's random RPC port and the demo payer, nothing to copy. */
function writeDevChain(config: Config, service: Service): void {
  const { chain } = service
  const payer = chain.devChain?.payers[0]
  writeDevChainFile({
    rpc_url: chain.rpcUrl,
    chain_id: chain.chainId,
    usdc_address: chain.usdc.address,
    treasury: chain.treasury,
    payer: payer ? { address: payer.address, private_key: payer.privateKey } : null,
    api_url: service.url,
    admin_url: `http://${config.admin.host}:${service.adminPort}`,
    database: config.database.url ? 'server' : 'embedded',
    admin_token: config.secrets.admin_token,
    pid: process.pid,
    written_at: new Date().toISOString(),
  })
}

/** One of N data-plane processes: the parent's database, jobs in worker 0 only on the embedded database. */
async function runWorker(config: Config, worker: NonNullable<ReturnType<typeof workerEnv>>): Promise<void> {
  // The parent's /metrics asks every worker for this registry over cluster IPC and sums them.
  answerParentMetrics()
  const service = await startService(config, {
    worker: {
      databaseUrl: worker.databaseUrl,
      embedded: worker.embedded,
      // On a server every worker competes for the leader lock; the embedded database has no lock.
      runJobs: !worker.embedded || worker.index === 0,
      adminPort: 0,
      index: worker.index,
    },
  })
  process.send?.({ tollgate: 'ready', port: service.port, adminPort: service.adminPort })
  onSignals(config, service.logger, () => service.stop())
}

async function runSupervisor(config: Config, count: number): Promise<void> {
  const logger = createLogger(config.log.level)
  const supervisor = await startSupervisor(config, { count, logger })
  await supervisor.ready
  const host = config.server.host === '0.0.0.0' ? '127.0.0.1' : config.server.host
  process.stdout.write(
    `\ntollgate listening on ${config.server.public_url ?? `http://${host}:${supervisor.port}`}  (admin: http://${host}:${supervisor.adminPort}/metrics)\n` +
      `  workers   ${count} processes on one port (pids ${supervisor.pids().join(', ')})\n\n`,
  )
  onSignals(config, logger, () => supervisor.stop())
}

function banner(config: Config, service: Service): string[] {
  const { chain } = service
  const lines = [
    '',
    `tollgate listening on ${service.url}  (admin: http://${config.admin.host}:${service.adminPort}/metrics)`,
    `  network   ${chain.network} (chain id ${chain.chainId}), RPC ${chain.rpcUrl}`,
    `  USDC      ${chain.usdc.address}`,
    `  treasury  ${chain.treasury}`,
    `  database  ${config.database.url ? 'PostgreSQL server' : `embedded PGlite in ${config.database.data_dir}`}`,
  ]
  const payer = chain.devChain?.payers[0]
  if (chain.devChain)
    lines.push(`  dev chain ${devChainFilePath()} (read by npm run pay and npm run reconcile)`)
  if (payer) {
    lines.push(
      `  demo payer ${payer.address} holds ${formatDollars(configDollars(config.chain.dev_payer_funding))} USDC`,
      `             private key ${payer.privateKey}  (anvil test key, never use on a real network)`,
      '',
      'try (README, five-minute walk-through):',
      `  curl -s -X POST ${service.url}/api/v1/register -H 'content-type: application/json' \\`,
      `       -d '{"wallet_address":"${chain.devChain!.payers[1]?.address ?? payer.address}","business_name":"Demo"}'`,
      '  npm run pay -- <metered_url>     # pays its price with the demo payer, prints the tx hash',
    )
  }
  return lines
}

function onSignals(
  config: Config,
  logger: { info(msg: string, fields?: Record<string, unknown>): void },
  stop: () => Promise<void>,
): void {
  let stopping = false
  const shutdown = (signal: string) => {
    if (stopping) return
    stopping = true
    logger.info('shutting down', { signal })
    const force = setTimeout(() => process.exit(1), config.server.shutdown_grace_ms).unref()
    stop().then(
      () => {
        clearTimeout(force)
        process.exit(0)
      },
      () => process.exit(1),
    )
  }
  process.on('SIGTERM', () => shutdown('SIGTERM'))
  process.on('SIGINT', () => shutdown('SIGINT'))
}

main().catch((err) => {
  const code = (err as { code?: string }).code
  process.stderr.write(`tollgate: failed to start${code ? ` (${code})` : ''}: ${(err as Error).message}\n`)
  process.exit(1)
})
