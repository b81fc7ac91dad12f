// CPU per signed settlement batch (src/chain/settle-batch.ts): the calldata of settle(token, items) and the
// EIP-1559 transaction, by viem (encodeFunctionData, serializeTransaction) against by hand
// (src/chain/settle-batch-encoding.ts), both signed by the treasury's native account (which decodes the
// unsigned transaction's hex by Buffer for its hash either way). One core, in turn.
//   npx tsx bench/settle-encoding.ts [--items 100] [--rounds 300]
import { randomBytes } from 'node:crypto'
import { parseArgs } from 'node:util'
import { bytesToHex, getAddress, type Hex, serializeTransaction } from 'viem'
import type { StoredAuthorization } from '../src/chain/settle.ts'
import { settleCalldata, settleCalldataByViem } from '../src/chain/settle-batch-encoding.ts'
import { signingAccount } from '../src/chain/signing-account.ts'
import { serializeEip1559Transaction } from '../src/chain/transaction-rlp.ts'

const { values } = parseArgs({
  options: { items: { type: 'string', default: '100' }, rounds: { type: 'string', default: '300' } },
})
const items = Number(values.items)
const rounds = Number(values.rounds)
const hex = (bytes: number): Hex => bytesToHex(randomBytes(bytes))
const account = signingAccount(hex(32))
const usdc = getAddress(hex(20))
const batch: StoredAuthorization[] = Array.from({ length: items }, () => ({
  from: getAddress(hex(20)),
  to: getAddress(hex(20)),
  value: '10000',
  validAfter: '0',
  validBefore: String(Math.floor(Date.now() / 1000) + 600),
  nonce: hex(32),
  signature: hex(65),
}))

async function sign(byHand: boolean, nonce: number): Promise<Hex> {
  const tx = {
    type: 'eip1559' as const,
    chainId: 84532,
    to: usdc,
    data: byHand ? settleCalldata(usdc, batch) : settleCalldataByViem(usdc, batch),
    nonce,
    gas: 250_000n + 120_000n * BigInt(items),
    maxFeePerGas: 1_000_000_000n,
    maxPriorityFeePerGas: 1_000_000n,
    value: 0n,
  }
  return byHand
    ? account.signTransaction(tx, { serializer: serializeEip1559Transaction })
    : account.signTransaction(tx, { serializer: serializeTransaction })
}

const results: Record<string, number[]> = { viem: [], hand: [] }
for (let turn = 0; turn < 6; turn++) {
  const byHand = turn % 2 === 1
  const started = process.cpuUsage()
  for (let i = 0; i < rounds; i++) await sign(byHand, i)
  const used = process.cpuUsage(started)
  results[byHand ? 'hand' : 'viem']!.push(Math.round((used.user + used.system) / rounds))
}
process.stdout.write(
  `${JSON.stringify({ items, rounds, cpu_us_per_signed_batch: results, same_bytes: (await sign(true, 7)) === (await sign(false, 7)) })}\n`,
)
