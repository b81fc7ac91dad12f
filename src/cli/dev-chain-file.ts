// .data/dev-chain.json: what `npm start` on the local chain tells the CLIs (RPC URL, USDC, the demo payer,
// the service's URLs and pid), so `npm run pay` and `npm run reconcile` need nothing copied from the banner.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'

export interface DevChainFile {
  rpc_url: string
  chain_id: number
  usdc_address: string
  treasury: string
  /** anvil's well-known test key, funded with test USDC: never a real key. */
  payer: { address: string; private_key: string } | null
  api_url: string
  admin_url: string
  /** Embedded PGlite (only the running process may open it) or a PostgreSQL server. */
  database: 'embedded' | 'server'
  /** The running service's admin token (generated per run on the local chain unless ADMIN_TOKEN is set). */
  admin_token?: string | null
  pid: number
  written_at: string
}

/** TOLLGATE_DEV_CHAIN_FILE, else .data/dev-chain.json under the working directory. */
export function devChainFilePath(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(env.TOLLGATE_DEV_CHAIN_FILE ?? '.data/dev-chain.json')
}

export function writeDevChainFile(info: DevChainFile, path = devChainFilePath()): void {
  mkdirSync(dirname(path), { recursive: true })
  writeFileSync(path, `${JSON.stringify(info, null, 2)}\n`, { mode: 0o600 })
}

export function removeDevChainFile(path = devChainFilePath()): void {
  rmSync(path, { force: true })
}

/** The file's content when it exists and the process that wrote it still runs; null otherwise. */
export function readDevChainFile(path = devChainFilePath()): DevChainFile | null {
  let info: DevChainFile
  try {
    info = JSON.parse(readFileSync(path, 'utf8')) as DevChainFile
  } catch {
    return null
  }
  try {
    process.kill(info.pid, 0)
  } catch (err) {
    // EPERM: alive but not ours; anything else: gone, the file is stale.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return null
  }
  return info
}

/**
 * The environment a CLI loads its configuration from: the process's, with the running dev chain's RPC URL and
 * USDC address filled in when RPC_URL is unset.
 */
export function envWithDevChain(running: DevChainFile | null): NodeJS.ProcessEnv {
  const env = { ...process.env }
  if (running && !env.RPC_URL) {
    env.RPC_URL = running.rpc_url
    env.USDC_ADDRESS ??= running.usdc_address
  }
  return env
}
