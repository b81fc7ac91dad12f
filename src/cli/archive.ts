// `npm run archive -- --before YYYY-MM [--out DIR]`: every month partition of calls, ledger entries and
// call deliveries before that month goes to DIR/<YYYY-MM>/<table>.tsv.gz with a manifest.json, is checked
// by reading it back, then detached and dropped (src/books/archive.ts says what must hold first).
// `npm run archive -- --verify DIR` re-checks the files a manifest names. Exit codes: 0 done (or verified),
// 1 refused (money still open, month not closed) or a file that does not verify, 2 could not run.
import { parseArgs } from 'node:util'
import { ArchiveRefused, archiveMonths } from '../books/archive.ts'
import { ConfigError, loadConfig } from '../config/load.ts'
import { verifyArchive } from '../db/archive-files.ts'
import { type EmbeddedDatabase, startEmbeddedDatabase } from '../db/embedded.ts'
import { migrate } from '../db/migrate.ts'
import { createSql } from '../db/sql.ts'
import { readDevChainFile } from './dev-chain-file.ts'
import { isMain } from './is-main.ts'

const USAGE = `usage: npm run archive -- --before YYYY-MM [--out DIR]
       npm run archive -- --verify DIR

  --before   archive every month before this one (it must not be after the current month)
  --out      where the files go (default retention.archive_dir, ./archive): DIR/<YYYY-MM>/
  --verify   re-check the checksums, sizes and row counts of an archive (a month's directory or DIR)
  -h, --help

reads the configuration like npm start (DATABASE_URL, or the embedded database when the service is not
running). exit 0 done, 1 refused or not verified, 2 could not run
`

export async function runArchive(argv: string[], out: (s: string) => void = (s) => process.stdout.write(s)) {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      before: { type: 'string' },
      out: { type: 'string' },
      verify: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    out(USAGE)
    return 0
  }
  if (values.verify !== undefined) {
    const r = await verifyArchive(values.verify)
    out(
      r.ok
        ? `OK: ${r.checked} files verified\n`
        : `NOT VERIFIED:\n${r.problems.map((p) => `  - ${p}\n`).join('')}`,
    )
    return r.ok ? 0 : 1
  }
  if (values.before === undefined) {
    throw Object.assign(new Error('--before YYYY-MM or --verify DIR is needed'), {
      code: 'ERR_PARSE_ARGS_USAGE',
    })
  }
  const config = loadConfig()
  let embedded: EmbeddedDatabase | null = null
  let url = config.database.url
  if (!url) {
    if (readDevChainFile()?.database === 'embedded') {
      throw new Error('the running npm start holds the embedded database: stop it, then archive')
    }
    embedded = await startEmbeddedDatabase({ dataDir: config.database.data_dir })
    url = embedded.url
  }
  const sql = createSql(url, { max: 1, applicationName: 'tollgate-archive' })
  try {
    await migrate(sql)
    const done = await archiveMonths(sql, {
      before: values.before,
      outDir: values.out ?? config.retention.archive_dir,
      nowMs: Date.now(),
    })
    if (done.length === 0) out(`nothing to archive before ${values.before}\n`)
    for (const m of done) {
      out(`${m.month} → ${m.dir}\n`)
      for (const f of m.files) out(`  ${f.file}  ${f.rows} rows  ${f.bytes} bytes  sha256 ${f.sha256}\n`)
    }
    return 0
  } catch (err) {
    if (!(err instanceof ArchiveRefused)) throw err
    process.stderr.write(`archive: refused: ${err.message}\n`)
    return 1
  } finally {
    await sql.end({ timeout: 5 })
    await embedded?.stop()
  }
}

if (isMain(import.meta.url)) {
  runArchive(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      const msg = err instanceof ConfigError ? err.message : (err as Error).message
      const usage = (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS') ? `\n${USAGE}` : ''
      process.stderr.write(`archive: ${msg}\n${usage}`)
      process.exit(2)
    },
  )
}
