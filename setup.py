"""Shim for tools that still call ``setup.py``; all metadata lives in ``setup.cfg``."""

from setuptools import setup

setup()
