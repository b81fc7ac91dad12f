// Other tokens and failing transactions, for proofs that must be refused.
import { type Address, createWalletClient, encodeFunctionData, type Hex, http } from 'viem'
import { testUsdcArtifact } from '../../src/chain/contracts/artifacts.ts'
import { chainClients, erc20, type Funded, fundedAccount } from './accounts.ts'

/** A second ERC-20 (same bytecode as the test USDC, another address): "a different token". */
export async function deployToken(): Promise<{
  address: Address
  mint(to: Address, value: bigint): Promise<void>
}> {
  const { rpcUrl, publicClient } = chainClients()
  // Its own fresh deployer (and so minter): the shared anvil's first account sends nothing from tests.
  const deployer = createWalletClient({ account: (await fundedAccount(0n)).account, transport: http(rpcUrl) })
  const hash = await deployer.deployContract({
    abi: testUsdcArtifact.abi,
    bytecode: testUsdcArtifact.bytecode,
    chain: null,
  })
  const receipt = await publicClient.waitForTransactionReceipt({ hash })
  const address = receipt.contractAddress!
  return {
    address,
    async mint(to, value) {
      const h = await deployer.writeContract({
        address,
        abi: erc20,
        functionName: 'mint',
        args: [to, value],
        chain: null,
      })
      await publicClient.waitForTransactionReceipt({ hash: h })
    },
  }
}

/** A USDC transfer of more than the payer holds, sent with a fixed gas limit so it is mined and reverts. */
export async function sendRevertingTransfer(payer: Funded, to: Address): Promise<Hex> {
  const { rpcUrl, publicClient, usdc } = chainClients()
  const wallet = createWalletClient({ account: payer.account, transport: http(rpcUrl) })
  const hash = await wallet.sendTransaction({
    to: usdc,
    data: encodeFunctionData({ abi: erc20, functionName: 'transfer', args: [to, 10n ** 30n] }),
    gas: 100_000n,
    chain: null,
  })
  const receipt = await publicClient.waitForTransactionReceipt({ hash })
  if (receipt.status !== 'reverted') throw new Error('expected a reverted transaction')
  return hash
}
