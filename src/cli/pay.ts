// npm run pay -- <metered or payment URL | recipient address> [amount]: pays USDC on the dev chain from the
// demo payer and prints the transaction hash (the proof for x-payment). Given a URL it reads the 402 to learn
// what to pay. The RPC URL, USDC address and payer come from .data/dev-chain.json (written by npm start)
// unless RPC_URL / USDC_ADDRESS / PAYER_KEY or the options say otherwise.
// Exit codes: 0 paid, 1 could not pay (the URL, the chain or the transfer failed), 2 usage.
import { parseArgs } from 'node:util'
import { createPublicClient, createWalletClient, type Hex, http, isAddress, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { devAccount } from '../chain/dev-accounts.ts'
import { parseDollars } from '../money.ts'
import { devChainFilePath, readDevChainFile } from './dev-chain-file.ts'
import { isMain } from './is-main.ts'

const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])

const USAGE = `usage: npm run pay -- <url | recipient> [amount] [options]

  <url>        a metered URL (/m/…) or a payment URL (/pay/…): pays what its 402 asks
  <recipient>  an address, with [amount] in dollars (e.g. 0.01)

options (each also from the environment; default: .data/dev-chain.json, written by npm start):
  --rpc-url <url>    RPC_URL       the dev chain's RPC
  --usdc <address>   USDC_ADDRESS  the token (with a recipient address)
  --key <0x…>        PAYER_KEY     the payer's private key (default: the demo payer)
  -h, --help

prints the transaction hash; exit 0 paid, 1 failed, 2 usage
`

class UsageError extends Error {}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      'rpc-url': { type: 'string' },
      usdc: { type: 'string' },
      key: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const [target, amountArg] = positionals
  if (!target || positionals.length > 2) throw new UsageError('give a URL or a recipient address')
  const payer = devPayer(env, { rpcUrl: values['rpc-url'], key: values.key })
  let recipient: string
  let asset = values.usdc ?? env.USDC_ADDRESS ?? payer.usdc
  let atomic: bigint
  if (/^https?:\/\//.test(target)) {
    const r = await fetch(target, { headers: { accept: 'application/json' } }).catch((err: unknown) => {
      // fetch says only "fetch failed"; what failed (refused, no such host, timeout) is in its cause.
      const cause = (err as { cause?: { code?: string; message?: string } }).cause
      throw new Error(`cannot reach ${target}: ${cause?.code ?? cause?.message ?? (err as Error).message}`)
    })
    if (r.status !== 402) throw new Error(`${target} answered ${r.status}, not 402: nothing to pay`)
    const req = (await r.json().catch(() => null)) as {
      recipient?: string
      asset?: string
      price_atomic?: string
    } | null
    if (!req?.recipient || !req.asset || !req.price_atomic) {
      throw new Error(`${target} answered 402 without a payment requirement (recipient, asset, price_atomic)`)
    }
    recipient = req.recipient
    asset = req.asset
    atomic = BigInt(req.price_atomic)
  } else {
    if (!isAddress(target))
      throw new UsageError('the recipient must be an address, or give a URL that answers 402')
    const parsed = parseDollars(amountArg ?? '')
    if (!parsed.ok) throw new UsageError(`amount ${parsed.reason}`)
    if (!asset) throw new UsageError('no USDC address: set USDC_ADDRESS or --usdc')
    recipient = target
    atomic = parsed.atomic
  }
  const hash = await transferUsdc(payer, { asset: asset as Hex, recipient: recipient as Hex, atomic })
  process.stdout.write(`${hash}\n`)
  return 0
}

/**
 * The payer: RPC URL and key from the options, else the environment, else .data/dev-chain.json (written by
 * npm start on the local chain: the funded demo payer), and the USDC address that file names.
 */
export function devPayer(
  env: NodeJS.ProcessEnv,
  given: { rpcUrl?: string | undefined; key?: string | undefined } = {},
): { rpcUrl: string; key: Hex; usdc: string | undefined } {
  const file = readDevChainFile()
  const rpcUrl = given.rpcUrl ?? env.RPC_URL ?? file?.rpc_url
  if (!rpcUrl) {
    throw new Error(
      `no RPC URL: start the service with npm start (it writes ${devChainFilePath(env)}), or set RPC_URL`,
    )
  }
  const key = (given.key ?? env.PAYER_KEY ?? file?.payer?.private_key ?? devAccount(1).privateKey) as Hex
  return { rpcUrl, key, usdc: file?.usdc_address }
}

/** One USDC transfer from the payer's key, waited for until mined; its hash (what x-payment carries). */
export async function transferUsdc(
  payer: { rpcUrl: string; key: Hex },
  q: { asset: Hex; recipient: Hex; atomic: bigint },
): Promise<Hex> {
  const wallet = createWalletClient({
    account: privateKeyToAccount(payer.key),
    transport: http(payer.rpcUrl),
  })
  const hash = await wallet.writeContract({
    address: q.asset,
    abi: transferAbi,
    functionName: 'transfer',
    args: [q.recipient, q.atomic],
    chain: null,
  })
  const receipt = await createPublicClient({ transport: http(payer.rpcUrl) }).waitForTransactionReceipt({
    hash,
  })
  if (receipt.status !== 'success') throw new Error(`transfer ${hash} reverted`)
  return hash
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      const usage = err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
      process.stderr.write(`pay: ${(err as Error).message}\n${usage ? `\n${USAGE}` : ''}`)
      process.exit(usage ? 2 : 1)
    },
  )
}
