// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title ReentrantToken
/// @notice A hostile ERC-20 for tests of reentrancy guards. Its transferFrom
/// first calls a target with calldata the test chose (setReentry), records
/// whether that call succeeded and what it returned or reverted with, and
/// then moves the tokens as usual. Mint is open to anyone.
contract ReentrantToken {
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    address public reentryTarget;
    bytes public reentryData;

    /// @notice Whether the last reentrant call succeeded, and its return or
    /// revert data.
    bool public lastReentrySucceeded;
    bytes public lastReentryResult;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    function mint(address to, uint256 value) external {
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    /// @notice Makes the next transferFrom call target with data first; a zero
    /// target turns the reentry off.
    function setReentry(address target, bytes calldata data) external {
        reentryTarget = target;
        reentryData = data;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        if (reentryTarget != address(0)) {
            address target = reentryTarget;
            reentryTarget = address(0); // once: the reentrant call must not loop
            (lastReentrySucceeded, lastReentryResult) = target.call(reentryData);
        }
        require(allowance[from][msg.sender] >= value, "ReentrantToken: allowance");
        require(balanceOf[from] >= value, "ReentrantToken: balance");
        allowance[from][msg.sender] -= value;
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
        return true;
    }
}
