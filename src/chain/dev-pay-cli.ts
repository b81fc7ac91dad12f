// npm run pay -- <metered or payment URL | recipient> [amount dollars]: pays USDC on the dev chain with the
// demo payer, so the README walk-through works with curl and nothing else. Reads the 402 to learn what
// to pay when given a URL. Prints the transaction hash (the proof for x-payment).
import { createPublicClient, createWalletClient, type Hex, http, isAddress, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { parseDollars } from '../money.ts'
import { devAccount } from './dev-accounts.ts'

const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])

async function main() {
  const [target, amountArg] = process.argv.slice(2)
  const rpcUrl = process.env.RPC_URL
  if (!target || !rpcUrl) {
    process.stderr.write(
      'usage: RPC_URL=<dev chain rpc> [USDC_ADDRESS=…] [PAYER_KEY=0x…] npm run pay -- <url|recipient> [amount]\n',
    )
    process.exit(2)
  }
  let recipient: string
  let asset = process.env.USDC_ADDRESS
  let atomic: bigint
  if (/^https?:\/\//.test(target)) {
    const r = await fetch(target, { headers: { accept: 'application/json' } })
    if (r.status !== 402) throw new Error(`${target} answered ${r.status}, not 402`)
    const req = (await r.json()) as { recipient: string; asset: string; price_atomic: string }
    recipient = req.recipient
    asset = req.asset
    atomic = BigInt(req.price_atomic)
  } else {
    if (!isAddress(target)) throw new Error('recipient must be an address or a URL answering 402')
    const parsed = parseDollars(amountArg ?? '')
    if (!parsed.ok || !asset) throw new Error('give an amount in dollars and USDC_ADDRESS')
    recipient = target
    atomic = parsed.atomic
  }
  const account = privateKeyToAccount((process.env.PAYER_KEY as Hex | undefined) ?? devAccount(1).privateKey)
  const wallet = createWalletClient({ account, transport: http(rpcUrl) })
  const hash = await wallet.writeContract({
    address: asset as Hex,
    abi: transferAbi,
    functionName: 'transfer',
    args: [recipient as Hex, atomic],
    chain: null,
  })
  await createPublicClient({ transport: http(rpcUrl) }).waitForTransactionReceipt({ hash })
  process.stdout.write(`${hash}\n`)
}

main().catch((err) => {
  process.stderr.write(`pay: ${(err as Error).message}\n`)
  process.exit(1)
})
