// `npm run reconcile -- [--from <time>] [--to <time>] [--json]`: the chain against the books, to the base
// unit. <time> is ISO 8601, epoch milliseconds, or a duration back from now (90m, 24h, 7d). Exit codes:
// 0 = no difference, 1 = a difference (listed), 2 = could not reconcile (configuration, database, RPC).
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { connectChain } from '../../chain/connect.ts'
import { ConfigError, loadConfig } from '../../config/load.ts'
import { type EmbeddedDatabase, startEmbeddedDatabase } from '../../db/embedded.ts'
import { createSql } from '../../db/sql.ts'
import { formatDollars } from '../../money.ts'
import { type ReconcileReport, reconcile } from './reconcile.ts'

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }

export function parseTime(text: string, nowMs: number): number {
  const rel = /^(\d+)([smhd])$/.exec(text)
  if (rel) return nowMs - Number(rel[1]) * UNITS[rel[2]!]!
  if (/^\d{10,}$/.test(text)) return Number(text)
  const ms = Date.parse(text)
  if (Number.isNaN(ms)) throw new Error(`not a time: ${text} (use ISO 8601, epoch ms, or 24h / 7d)`)
  return ms
}

function parseArgs(argv: string[]) {
  const now = Date.now()
  const out: { fromMs: number | null; toMs: number | null; json: boolean } = {
    fromMs: null,
    toMs: null,
    json: false,
  }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!
    if (a === '--json') out.json = true
    else if (a === '--from') out.fromMs = parseTime(argv[++i] ?? '', now)
    else if (a === '--to') out.toMs = parseTime(argv[++i] ?? '', now)
    else
      throw new Error(
        `unknown argument ${a}; usage: npm run reconcile -- [--from <time>] [--to <time>] [--json]`,
      )
  }
  return out
}

export function formatReport(r: ReconcileReport): string {
  const line = (label: string, atomic: string) =>
    `  ${label.padEnd(34)} ${atomic.padStart(20)}  (${formatDollars(BigInt(atomic))} USDC)`
  const lines = [
    `reconcile  treasury ${r.treasury}  token ${r.token}`,
    `  range ${r.range.from ?? 'genesis'} → ${r.range.to ?? 'now'}  (blocks ${r.range.from_block}..${r.range.to_block})`,
    'inflow (proof transfers to the treasury)',
    `  claims                             ${String(r.inflow.claims).padStart(20)}`,
    line('chain: proof transfers', r.inflow.chain_proof_transfers_atomic),
    line('books: captured calls', r.inflow.captured_calls_atomic),
    line('books: applied payments', r.inflow.applied_payments_atomic),
    line('books: refunds', r.inflow.refunds_atomic),
    line('books: uncaptured in window', r.inflow.uncaptured_in_window_atomic),
    line('difference', r.inflow.difference_atomic),
    line('unclaimed inflow (info)', r.inflow.unclaimed_inflow_atomic),
    'outflow (transfers from the treasury)',
    line('chain: transfers', r.outflow.chain_transfers_atomic),
    line('books: confirmed payouts', r.outflow.confirmed_payouts_atomic),
    line('books: in flight', r.outflow.in_flight_payouts_atomic),
    line('unknown outflow', r.outflow.unknown_outflow_atomic),
    line('difference', r.outflow.difference_atomic),
    'split (captured = owner shares + fees)',
    line('captured', r.split.captured_atomic),
    line('owner shares', r.split.owner_shares_atomic),
    line('fees', r.split.fees_atomic),
    line('difference', r.split.difference_atomic),
    'confirmed payouts = linked ledger entries',
    line('payouts', r.payout_entries.confirmed_payouts_atomic),
    line('entries', r.payout_entries.linked_entries_atomic),
    line('difference', r.payout_entries.difference_atomic),
    r.ok ? 'OK: no difference' : `DIFFERENCES (${r.differences.length}):`,
    ...r.differences.map((d) => `  - ${d}`),
  ]
  return `${lines.join('\n')}\n`
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2))
  const config = loadConfig()
  if (config.chain.network === 'local' && !config.chain.rpc_url) {
    throw new Error(
      'NETWORK=local needs RPC_URL and USDC_ADDRESS of the running dev chain (tollgate prints them at start), ' +
        'or ask the running service: GET http://<admin host:port>/reconcile',
    )
  }
  let embedded: EmbeddedDatabase | null = null
  let url = config.database.url
  if (!url) {
    embedded = await startEmbeddedDatabase({ dataDir: config.database.data_dir })
    url = embedded.url
  }
  const sql = createSql(url, { max: embedded ? 1 : 4, applicationName: 'tollgate-reconcile' })
  const chain = await connectChain(config)
  try {
    const report = await reconcile({ sql, chain, config }, { fromMs: args.fromMs, toMs: args.toMs })
    process.stdout.write(args.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report))
    return report.ok ? 0 : 1
  } finally {
    await chain.close()
    await sql.end({ timeout: 5 })
    await embedded?.stop()
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main().then(
    (code) => process.exit(code),
    (err) => {
      const msg = err instanceof ConfigError ? err.message : (err as Error).message
      process.stderr.write(`reconcile: ${msg}\n`)
      process.exit(2)
    },
  )
}
