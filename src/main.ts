// Command-line entry: load the configuration, start the service, print where it listens, drain on SIGTERM.
import { devChainFilePath, removeDevChainFile, writeDevChainFile } from './cli/dev-chain-file.ts'
import { ConfigError, loadConfig } from './config/load.ts'
import { configDollars, formatDollars } from './money.ts'
import { startService } from './service.ts'

async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>
  try {
    config = loadConfig()
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`tollgate: ${err.message}\n`)
      process.exit(78) // EX_CONFIG
    }
    throw err
  }
  const service = await startService(config)
  const { chain } = service
  const lines = [
    '',
    `tollgate listening on ${service.url}  (admin: http://${config.server.host}:${service.adminPort}/metrics)`,
    `  network   ${chain.network} (chain id ${chain.chainId}), RPC ${chain.rpcUrl}`,
    `  USDC      ${chain.usdc.address}`,
    `  treasury  ${chain.treasury}`,
    `  database  ${config.database.url ? 'PostgreSQL server' : `embedded PGlite in ${config.database.data_dir}`}`,
  ]
  const payer = chain.devChain?.payers[0]
  if (chain.devChain) {
    // For npm run pay / reconcile: the dev chain's random RPC port and the demo payer, nothing to copy.
    writeDevChainFile({
      rpc_url: chain.rpcUrl,
      chain_id: chain.chainId,
      usdc_address: chain.usdc.address,
      treasury: chain.treasury,
      payer: payer ? { address: payer.address, private_key: payer.privateKey } : null,
      api_url: service.url,
      admin_url: `http://${config.server.host}:${service.adminPort}`,
      database: config.database.url ? 'server' : 'embedded',
      pid: process.pid,
      written_at: new Date().toISOString(),
    })
    lines.push(`  dev chain ${devChainFilePath()} (read by npm run pay and npm run reconcile)`)
  }
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
  process.stdout.write(`${lines.join('\n')}\n\n`)

  let stopping = false
  const shutdown = (signal: string) => {
    if (stopping) return
    stopping = true
    service.logger.info('shutting down', { signal })
    if (chain.devChain) removeDevChainFile()
    const force = setTimeout(() => process.exit(1), config.server.shutdown_grace_ms).unref()
    service.stop().then(
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
