// `npm run reconcile -- [--full | --from <time> [--to <time>]] [--json]`: the chain against the books, to the
// base unit. Without a range it checks what is new since the last clean run (a checkpoint in the database;
// the first run, and --full, check everything and set it). <time> is ISO 8601, epoch milliseconds, or a duration back from now (90m, 24h, 7d). While `npm start`
// runs on its embedded database (which only that process may open), the running service is asked instead
// (its admin route /reconcile, over payouts.reconcile_range_ms). Exit codes: 0 = no difference,
// 1 = a difference (listed), 2 = could not reconcile (usage, configuration, database, RPC).
import { parseArgs } from 'node:util'
import { connectChain } from '../chain/connect.ts'
import { ConfigError, loadConfig } from '../config/load.ts'
import { type ReconcileReport, reconcile } from '../control-plane/jobs/reconcile.ts'
import { reconcileFromCheckpoint } from '../control-plane/jobs/reconcile-checkpoint.ts'
import { type EmbeddedDatabase, startEmbeddedDatabase } from '../db/embedded.ts'
import { createSql } from '../db/sql.ts'
import { formatDollars } from '../money.ts'
import { type DevChainFile, envWithDevChain, readDevChainFile } from './dev-chain-file.ts'
import { isMain } from './is-main.ts'

const USAGE = `usage: npm run reconcile -- [--full | --from <time> [--to <time>]] [--json]

  (none)   what is new since the last clean run (its checkpoint); the first run checks everything
  --full   everything, from genesis (a clean full run sets the checkpoint too)
  <time>   ISO 8601, epoch milliseconds, or a duration back from now (90m, 24h, 7d); a range never moves
           the checkpoint
  --json   the report as JSON
  -h, --help

reads the configuration like npm start (DATABASE_URL, NETWORK, RPC_URL, …); on the local chain the RPC URL
and USDC address come from .data/dev-chain.json. exit 0 no difference, 1 differences, 2 could not reconcile
`

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }

export function parseTime(text: string, nowMs: number): number {
  const rel = /^(\d+)([smhd])$/.exec(text)
  if (rel) return nowMs - Number(rel[1]) * UNITS[rel[2]!]!
  if (/^\d{10,}$/.test(text)) return Number(text)
  const ms = Date.parse(text)
  if (Number.isNaN(ms)) throw new Error(`not a time: ${text} (use ISO 8601, epoch ms, or 24h / 7d)`)
  return ms
}

function readArgs(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      from: { type: 'string' },
      to: { type: 'string' },
      json: { type: 'boolean' },
      full: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  const now = Date.now()
  if (values.full && (values.from !== undefined || values.to !== undefined)) {
    throw Object.assign(new Error('--full checks everything: it takes no --from/--to'), {
      code: 'ERR_PARSE_ARGS_USAGE',
    })
  }
  return {
    full: values.full ?? false,
    help: values.help ?? false,
    fromMs: values.from === undefined ? null : parseTime(values.from, now),
    toMs: values.to === undefined ? null : parseTime(values.to, now),
    json: values.json ?? false,
  }
}

export function formatReport(r: ReconcileReport): string {
  const line = (label: string, atomic: string) =>
    `  ${label.padEnd(34)} ${atomic.padStart(20)}  (${formatDollars(BigInt(atomic))} USDC)`
  const lines = [
    `reconcile  treasury ${r.treasury}  token ${r.token}`,
    `  range ${r.range.from ?? 'genesis'} → ${r.range.to ?? 'now'}  (blocks ${r.range.from_block}..${r.range.to_block})`,
    ...(r.checkpoint
      ? [
          `  ${r.checkpoint.mode} run${r.checkpoint.since ? ` since ${r.checkpoint.since}` : ''}; checkpoint ${r.checkpoint.saved ? 'moved' : 'kept (differences)'}`,
        ]
      : []),
    'inflow (proof transfers to the treasury)',
    `  claims                             ${String(r.inflow.claims).padStart(20)}`,
    line('chain: proof transfers', r.inflow.chain_proof_transfers_atomic),
    line('books: captured calls', r.inflow.captured_calls_atomic),
    line('books: applied payments', r.inflow.applied_payments_atomic),
    line('books: refunds', r.inflow.refunds_atomic),
    line('books: uncaptured in window', r.inflow.uncaptured_in_window_atomic),
    line('difference', r.inflow.difference_atomic),
    `  settled after the chain was read   ${String(r.inflow.settled_after_read).padStart(20)}`,
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
    ...(r.refunds
      ? [
          "merchants' refunds = their entries and payouts",
          `  refunds paid / pending / failed    ${`${r.refunds.paid} / ${r.refunds.pending} / ${r.refunds.failed}`.padStart(20)}`,
        ]
      : []),
    'running balances = sums of their ledger entries',
    `  accounts checked                   ${String(r.balances.accounts_checked).padStart(20)}`,
    `  wallets checked                    ${String(r.balances.wallets_checked).padStart(20)}`,
    `  drifted accounts / wallets         ${`${r.balances.drifted_accounts} / ${r.balances.drifted_wallets}`.padStart(20)}`,
    r.ok ? 'OK: no difference' : `DIFFERENCES (${r.differences.length}):`,
    ...r.differences.map((d) => `  - ${d}`),
  ]
  return `${lines.join('\n')}\n`
}

async function main(argv: string[]): Promise<number> {
  const args = readArgs(argv)
  if (args.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const running = readDevChainFile()
  const config = loadConfig({ env: envWithDevChain(running) })
  if (!config.database.url && running?.database === 'embedded') return viaService(running, args)
  if (config.chain.network === 'local' && !config.chain.rpc_url) {
    throw new Error(
      'NETWORK=local needs the running dev chain: start the service with npm start (it writes ' +
        '.data/dev-chain.json), or set RPC_URL and USDC_ADDRESS',
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
    const deps = { sql, chain, config }
    const ranged = args.fromMs !== null || args.toMs !== null
    const report = ranged
      ? await reconcile(deps, { fromMs: args.fromMs, toMs: args.toMs })
      : await reconcileFromCheckpoint(deps, { full: args.full })
    process.stdout.write(args.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report))
    return report.ok ? 0 : 1
  } finally {
    await chain.close()
    await sql.end({ timeout: 5 })
    await embedded?.stop()
  }
}

/** The embedded database belongs to the running service: ask it (GET <admin>/reconcile) rather than open it. */
async function viaService(running: DevChainFile, args: ReturnType<typeof readArgs>): Promise<number> {
  if (args.fromMs !== null || args.toMs !== null || args.full) {
    throw new Error(
      '--from/--to need the database (so does --full), which the running npm start holds (embedded); without them the ' +
        'service reconciles its last payouts.reconcile_range_ms',
    )
  }
  const token = running.admin_token ?? process.env.ADMIN_TOKEN
  const r = await fetch(`${running.admin_url}/reconcile`, {
    headers: token ? { authorization: `Bearer ${token}` } : {},
  })
  if (r.status !== 200 && r.status !== 409) {
    throw new Error(`${running.admin_url}/reconcile answered ${r.status}: ${await r.text()}`)
  }
  const report = (await r.json()) as ReconcileReport
  process.stdout.write(args.json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report))
  return report.ok ? 0 : 1
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      const msg = err instanceof ConfigError ? err.message : (err as Error).message
      const usage = (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS') ? `\n${USAGE}` : ''
      process.stderr.write(`reconcile: ${msg}\n${usage}`)
      process.exit(2)
    },
  )
}
