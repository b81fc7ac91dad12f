// Runs the x402 repository's own e2e clients and servers (vendored byte for byte under ./upstream, see
// PROVENANCE.md) as the suite runs them: one child process each, configured only by the environment
// variables the suite's runner passes. They import packages by name, so they run from a directory whose
// node_modules holds this project's packages plus the two the suite takes from its workspace and npm lacks
// (@x402/aptos, @x402/mcp), built here with esbuild from their vendored source at the same commit.
// X402_E2E_EXTRA_NODE_MODULES (optional) names a node_modules whose packages are laid over this project's:
// a way to try the suite before the packages it needs are in package.json.
import { type ChildProcess, spawn } from 'node:child_process'
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build, transform } from 'esbuild'
import { listensOn } from '../../src/port-probe.ts'

const here = dirname(fileURLToPath(import.meta.url))
const vendored = join(here, 'upstream')
const projectModules = resolve(here, '../../node_modules')

/** Packages on npm the vendored files import that must be in the project's node_modules. */
export const NPM_PACKAGES = [
  'dotenv',
  '@x402/svm',
  '@x402/stellar',
  '@x402/avm',
  '@aptos-labs/ts-sdk',
  '@solana/kit',
  '@scure/base',
  '@x402/extensions',
  '@modelcontextprotocol/sdk',
  'x402-fetch',
  'x402-axios',
]

/** Workspace packages of the x402 repository that are not on npm (404), built from vendored source. */
const WORKSPACE_BUILDS: Array<{ name: string; dir: string; entries: string[] }> = [
  {
    name: '@x402/aptos',
    dir: 'typescript/packages/mechanisms/aptos',
    entries: ['index', 'exact/client/index', 'exact/server/index', 'exact/facilitator/index'],
  },
  { name: '@x402/mcp', dir: 'typescript/packages/mcp', entries: ['index'] },
]

function linkAll(from: string, to: string): void {
  for (const entry of readdirSync(from)) {
    if (entry === '.bin' || entry.startsWith('.')) continue
    const source = join(from, entry)
    if (entry.startsWith('@')) {
      mkdirSync(join(to, entry), { recursive: true })
      for (const pkg of readdirSync(source)) {
        rmSync(join(to, entry, pkg), { force: true, recursive: true })
        symlinkSync(join(source, pkg), join(to, entry, pkg))
      }
    } else {
      rmSync(join(to, entry), { force: true, recursive: true })
      symlinkSync(source, join(to, entry))
    }
  }
}

export interface SuiteDir {
  root: string
  /** Absolute path of a vendored file, e.g. `clients/fetch/index.ts`. */
  file(path: string): string
  missing: string[]
  remove(): void
}

/** A run directory: the vendored tree copied unchanged, its node_modules, the two workspace builds. */
export async function prepareSuiteDir(): Promise<SuiteDir> {
  const root = mkdtempSync(join(tmpdir(), 'x402-e2e-'))
  cpSync(vendored, root, { recursive: true })
  const modules = join(root, 'node_modules')
  mkdirSync(modules)
  linkAll(projectModules, modules)
  const extra = process.env.X402_E2E_EXTRA_NODE_MODULES
  if (extra) linkAll(extra, modules)
  for (const pkg of WORKSPACE_BUILDS) {
    const out = join(modules, pkg.name)
    rmSync(out, { force: true, recursive: true })
    mkdirSync(out, { recursive: true })
    cpSync(join(vendored, pkg.dir, 'package.json'), join(out, 'package.json'))
    await build({
      entryPoints: Object.fromEntries(pkg.entries.map((e) => [e, join(vendored, pkg.dir, 'src', `${e}.ts`)])),
      bundle: true,
      packages: 'external',
      format: 'esm',
      platform: 'node',
      target: 'es2020',
      outdir: join(out, 'dist/esm'),
      outExtension: { '.js': '.mjs' },
      logLevel: 'error',
      tsconfigRaw: {},
    })
  }
  await transpileEntries(root)
  const missing = NPM_PACKAGES.filter((p) => !existsSync(join(modules, p, 'package.json')))
  return {
    root,
    file: (path) => join(root, path),
    missing,
    remove: () => rmSync(root, { force: true, recursive: true }),
  }
}

/** Every vendored entry (index.ts, and the runner's scripts/*.ts) beside its copy, as tsx would strip it, so node loads packages without loader hooks. */
async function transpileEntries(root: string): Promise<void> {
  const entries = readdirSync(root, { recursive: true, encoding: 'utf8' }).filter(
    (p) =>
      (p.endsWith('index.ts') || p.startsWith('scripts/')) &&
      p.endsWith('.ts') &&
      !p.includes('node_modules') &&
      !p.startsWith('typescript'),
  )
  for (const entry of entries) {
    const source = readFileSync(join(root, entry), 'utf8')
    const out = await transform(source, { loader: 'ts', format: 'esm', target: 'node20', tsconfigRaw: {} })
    writeFileSync(join(root, entry.replace(/\.ts$/, '.mjs')), out.code)
  }
}

export interface ClientRun {
  code: number | null
  stdout: string
  stderr: string
  /** The last line of stdout that parses as JSON: the structured result the suite's runner reads. */
  result: Record<string, any> | null
  /** Wall time from spawn to exit. */
  ms: number
}

/**
 * Runs a vendored one-shot client (or one of the runner's scripts, with its arguments) to its exit (its `pnpm
 * dev` is `tsx index.ts`: the same code, stripped of types).
 */
export function runClient(
  dir: SuiteDir,
  path: string,
  env: Record<string, string>,
  timeoutMs = 30_000,
  args: string[] = [],
) {
  return new Promise<ClientRun>((done) => {
    const file = dir.file(path)
    const child = spawn(process.execPath, [file.replace(/\.ts$/, '.mjs'), ...args], {
      cwd: dirname(file),
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => {
      stdout += d
    })
    child.stderr.on('data', (d) => {
      stderr += d
    })
    const started = Date.now()
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.on('exit', (code) => {
      clearTimeout(timer)
      done({ code, stdout, stderr, result: lastJsonLine(stdout), ms: Date.now() - started })
    })
  })
}

function lastJsonLine(text: string): Record<string, any> | null {
  for (const line of text.trim().split('\n').reverse()) {
    try {
      const parsed = JSON.parse(line)
      if (parsed && typeof parsed === 'object') return parsed
    } catch {
      // Not the result line (the legacy axios client logs its response first).
    }
  }
  return null
}

/** Starts a vendored server process; resolves once `readyUrl` answers. */
export async function startServer(
  dir: SuiteDir,
  path: string,
  env: Record<string, string>,
  readyUrl: string,
): Promise<{ child: ChildProcess; output: () => string; stop(): Promise<void> }> {
  const file = dir.file(path)
  const child = spawn(process.execPath, [file.replace(/\.ts$/, '.mjs')], {
    cwd: dirname(file),
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout!.on('data', (d) => {
    output += d
  })
  child.stderr!.on('data', (d) => {
    output += d
  })
  const stop = () =>
    new Promise<void>((done) => {
      if (child.exitCode !== null) return done()
      child.once('exit', () => done())
      child.kill('SIGTERM')
    })
  const deadline = Date.now() + 30_000
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${path} exited ${child.exitCode}:\n${output}`)
    try {
      // Ours, not a server that took the probed port first (the server then fails to bind and exits).
      const ok = (await fetch(readyUrl)).ok
      if (ok && listensOn(child.pid, Number(new URL(readyUrl).port)) !== false)
        return { child, output: () => output, stop }
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 200))
  }
  await stop()
  throw new Error(`${path} did not answer ${readyUrl} in 30 s:\n${output}`)
}

/**
 * The suite's pass rule (e2e/test.ts, runClientTest): the client succeeded, the answer is not a 402, and a
 * payment response, when there is one, has success, a transaction hash and no errorReason. Returns the
 * failure as the suite words it, or null on a pass.
 */
export function suiteVerdict(run: ClientRun): string | null {
  const r = run.result
  if (run.code !== 0 || !r) return `client exited ${run.code}: ${run.stdout}\n${run.stderr}`
  if (!r.success) return r.error || 'Client execution failed'
  if (r.status_code === 402) return `Payment failed (402): ${JSON.stringify(r.data)}`
  const p = r.payment_response
  if (p) {
    if (!p.success) return `Payment failed: ${p.errorReason || 'unknown error'}`
    if (!p.transaction) return 'Payment succeeded but no transaction hash returned'
    if (p.errorReason) return `Payment has error reason: ${p.errorReason}`
  }
  return null
}
