// Many real payment proofs, fast: N signed USDC transfers sent with automine off, then mined in big
// blocks. Each transaction hash pays one call, once, so a paid benchmark needs one per request.
import { type Address, createPublicClient, encodeFunctionData, type Hex, http, parseAbi, toHex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'

const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])

export async function makeProofs(options: {
  rpcUrl: string
  chainId: number
  usdc: Address
  payerKey: Hex
  treasury: Address
  value: bigint
  count: number
}): Promise<Hex[]> {
  const client = createPublicClient({ transport: http(options.rpcUrl, { batch: { batchSize: 500 } }) })
  const account = privateKeyToAccount(options.payerKey)
  const rpc = (method: string, params: unknown[] = []) =>
    client.request({ method: method as never, params: params as never })
  const startNonce = await client.getTransactionCount({ address: account.address, blockTag: 'pending' })
  const baseFee = await client.getGasPrice()
  const gasPrice = baseFee * 2n
  const data = encodeFunctionData({
    abi: transferAbi,
    functionName: 'transfer',
    args: [options.treasury, options.value],
  })
  await rpc('evm_setAutomine', [false])
  const hashes: Hex[] = []
  try {
    const CHUNK = 500
    for (let i = 0; i < options.count; i += CHUNK) {
      // Full blocks raise the base fee (EIP-1559) by 1/8 each: over a hundred chunks it would outgrow the
      // payer's ether. The bench's chain is private, so hold the base fee where it started.
      await rpc('anvil_setNextBlockBaseFeePerGas', [toHex(baseFee)])
      const signed = await Promise.all(
        Array.from({ length: Math.min(CHUNK, options.count - i) }, (_, j) =>
          account.signTransaction({
            chainId: options.chainId,
            type: 'legacy',
            to: options.usdc,
            data,
            nonce: startNonce + i + j,
            gas: 80_000n,
            gasPrice,
          }),
        ),
      )
      hashes.push(...((await Promise.all(signed.map((tx) => rpc('eth_sendRawTransaction', [tx])))) as Hex[]))
      // Mine as we go so the pool stays small.
      await rpc('evm_mine')
    }
    for (let k = 0; k < 200; k++) {
      const pending = (await rpc('txpool_status')) as { pending: Hex }
      if (BigInt(pending.pending) === 0n) break
      await rpc('evm_mine')
    }
  } finally {
    await rpc('evm_setAutomine', [true])
  }
  const last = await client.getTransactionReceipt({ hash: hashes.at(-1)! })
  if (last.status !== 'success') throw new Error('proof transfers failed')
  return hashes
}
