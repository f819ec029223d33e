"""converge"""
