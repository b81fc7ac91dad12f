// SPDX-License-Identifier: MIT
// tollgate's own ERC-3009 deposit collector for the x402 `batch-settlement` scheme (dev chain and tests;
// installed with anvil_setCode at 0x4020806089470a89826cB9fB1f4059150b550004, where the published client
// addresses its ReceiveWithAuthorization). collectorData is what @x402/evm's buildErc3009CollectorData
// encodes: (uint256 validAfter, uint256 validBefore, uint256 salt, bytes signature); the authorization's
// nonce is keccak256(abi.encode(channelId, salt)), which binds the payer's signature to one channel.
pragma solidity ^0.8.24;

interface IERC3009Receive {
  function receiveWithAuthorization(
    address from,
    address to,
    uint256 value,
    uint256 validAfter,
    uint256 validBefore,
    bytes32 nonce,
    bytes memory signature
  ) external;

  function transfer(address to, uint256 value) external returns (bool);
}

contract Erc3009DepositCollector {
  /// The channel contract: the only caller, and the only place the collected tokens go.
  address public constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

  function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata data) external {
    require(msg.sender == BATCH_SETTLEMENT, 'Erc3009DepositCollector: caller is not the channel contract');
    (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) = abi.decode(
      data,
      (uint256, uint256, uint256, bytes)
    );
    bytes32 nonce = keccak256(abi.encode(channelId, salt));
    // receiveWithAuthorization: only the payee (this contract) may submit it, so nobody can front-run the
    // payer's authorization into a transfer that skips the channel.
    IERC3009Receive(token).receiveWithAuthorization(payer, address(this), amount, validAfter, validBefore, nonce, signature);
    require(IERC3009Receive(token).transfer(msg.sender, amount), 'Erc3009DepositCollector: transfer failed');
  }
}
